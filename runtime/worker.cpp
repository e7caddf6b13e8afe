#include "runtime/worker.h"

#include <dlfcn.h>
#include <pthread.h>

#include <exception>

#include <ATen/Parallel.h>

namespace gpipe {

Worker::Worker(std::string name, int intra_op_threads)
    : name_(std::move(name)), intra_op_threads_(intra_op_threads), thread_([this] { Loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

std::future<void> Worker::Submit(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  auto future = packaged.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(packaged));
  }
  ready_.notify_one();
  return future;
}

void Worker::Loop() {
  // "gp:cpu/stage0" shows in top, gdb and perf (names are cut at 15 bytes).
  ::pthread_setname_np(::pthread_self(), ("gp:" + name_).substr(0, 15).c_str());
  if (intra_op_threads_ > 0) {
    at::set_num_threads(intra_op_threads_);  // ATen's pool, OpenMP's and MKL's
    // OpenBLAS (Debian's LibTorch) keeps a pool of its own that
    // at::set_num_threads does not size; its count is process-wide.
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
      set(intra_op_threads_);
  }
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // a packaged_task stores its exception in the future
  }
}

void WaitAll(std::vector<std::future<void>>& futures) {
  std::exception_ptr first;
  for (auto& f : futures) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace gpipe
