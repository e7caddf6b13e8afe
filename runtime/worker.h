#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>

namespace gpipe {

// One thread that runs submitted tasks in order. A pipeline has one per
// device (per stage on CPU), so that kernel launches for different devices
// never queue behind each other. Exceptions travel through the futures.
//
// `intra_op_threads` > 0 sets the worker's own ATen intra-op thread count
// (OpenMP's thread count is a per-thread setting), so that S CPU stages on C
// cores can use C/S threads each instead of C each; where OpenBLAS does the
// matrix products (Debian's LibTorch) its own pool is sized to that count too.
class Worker {
 public:
  explicit Worker(std::string name, int intra_op_threads = 0);
  ~Worker();  // finishes queued tasks, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  std::future<void> Submit(std::function<void()> task);
  const std::string& name() const { return name_; }

 private:
  void Loop();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  int intra_op_threads_;
  std::thread thread_;
};

// Waits for every future, then rethrows the first failure (in submission
// order), so that no task is still running when the caller sees the error.
void WaitAll(std::vector<std::future<void>>& futures);

}  // namespace gpipe
