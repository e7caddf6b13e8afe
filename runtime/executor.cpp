// The executor: waits, progress and failure for a plan's tasks, knowing
// nothing of what the tasks do (PipelineRun gives the bodies).

#include "runtime/executor.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <unordered_map>

namespace gpipe {
namespace {

// (kind, stage, micro-batch) as one key; B and I share one, since a
// dependency on "the input gradient" is met by whichever the schedule runs.
uint64_t KeyOf(const Action& a) {
  const uint64_t kind = a.kind == ActionKind::kBackward
                            ? static_cast<uint64_t>(ActionKind::kBackwardInput)
                            : static_cast<uint64_t>(a.kind);
  return (kind << 56) | (static_cast<uint64_t>(a.stage) << 32) |
         static_cast<uint64_t>(a.micro_batch);
}

// Shared by every thread of one Execute call; guarded by `mutex`.
struct Progress {
  explicit Progress(const ExecutionPlan& plan)
      : done(plan.actions.size(), 0),
        wake(plan.per_thread.size()),
        next(plan.per_thread.size(), 0),
        running(plan.per_thread.size(), 0) {
    for (const auto& actions : plan.per_thread) finished_threads += actions.empty();
  }
  std::mutex mutex;
  std::vector<char> done;                     // per action
  std::vector<std::condition_variable> wake;  // per plan thread (one thread each)
  std::vector<std::exception_ptr> failures;   // per action, only once something failed
  bool failed = false;
  // Shared threads only: per plan thread, the position in its list of its
  // next action and whether a shared thread runs one of its actions now.
  std::vector<size_t> next;
  std::vector<char> running;
  size_t finished_threads = 0;        // plan threads whose every action is done
  std::condition_variable any_ready;  // a shared thread may find work

  bool Ready(const ExecutionPlan& plan, size_t k) const {
    for (size_t need : plan.waits_for[k]) {
      if (!done[need]) return false;
    }
    return true;
  }
  // The plan thread whose next action is ready and earliest in plan order.
  std::optional<size_t> NextReadyThread(const ExecutionPlan& plan) const {
    std::optional<size_t> best;
    for (size_t t = 0; t < plan.per_thread.size(); ++t) {
      if (running[t] || next[t] == plan.per_thread[t].size()) continue;
      const size_t k = plan.per_thread[t][next[t]];
      if ((!best || k < plan.per_thread[*best][next[*best]]) && Ready(plan, k)) best = t;
    }
    return best;
  }
  void Fail(size_t k, std::exception_ptr failure) {
    if (failures.empty()) failures.resize(done.size());
    failures[k] = std::move(failure);
    failed = true;
    for (auto& cv : wake) cv.notify_all();
    any_ready.notify_all();
  }
};

// One thread per plan thread: its actions in order, each once it is ready.
void RunOwnThread(const ExecutionPlan& plan, size_t t, Progress& progress,
                  const std::function<void(const Action&)>& run) {
  for (size_t k : plan.per_thread[t]) {
    {
      std::unique_lock<std::mutex> lock(progress.mutex);
      progress.wake[t].wait(lock, [&] { return progress.failed || progress.Ready(plan, k); });
      if (progress.failed) return;  // skip the rest: a task failed
    }
    try {
      run(plan.actions[k]);
    } catch (...) {
      std::lock_guard<std::mutex> lock(progress.mutex);
      progress.Fail(k, std::current_exception());
      return;
    }
    {
      std::lock_guard<std::mutex> lock(progress.mutex);
      progress.done[k] = 1;
    }
    for (size_t other : plan.wakes[k]) progress.wake[other].notify_one();
  }
}

// A shared thread: the earliest ready next action of any plan thread, until
// every plan thread is finished. It wakes another shared thread only when a
// second action is ready, so a finished task usually goes straight on to
// the one it unblocked, on the same core.
void RunSharedThread(const ExecutionPlan& plan, Progress& progress,
                     const std::function<void(const Action&)>& run) {
  std::unique_lock<std::mutex> lock(progress.mutex);
  for (;;) {
    if (progress.failed || progress.finished_threads == plan.per_thread.size()) return;
    const std::optional<size_t> t = progress.NextReadyThread(plan);
    if (!t) {
      progress.any_ready.wait(lock);
      continue;
    }
    const size_t k = plan.per_thread[*t][progress.next[*t]];
    progress.running[*t] = 1;
    if (progress.NextReadyThread(plan)) progress.any_ready.notify_one();
    lock.unlock();
    try {
      run(plan.actions[k]);
    } catch (...) {
      lock.lock();
      progress.Fail(k, std::current_exception());
      return;
    }
    lock.lock();
    progress.done[k] = 1;
    progress.running[*t] = 0;
    if (++progress.next[*t] == plan.per_thread[*t].size() &&
        ++progress.finished_threads == plan.per_thread.size())
      progress.any_ready.notify_all();  // the others are waiting for work that will not come
  }
}

}  // namespace

ExecutionPlan PlanExecution(const ActionOrder& order,
                            const std::function<std::vector<Action>(const Action&)>& dependencies) {
  ExecutionPlan plan;
  plan.actions = order.global;
  const size_t n = plan.actions.size();
  std::unordered_map<uint64_t, size_t> position;
  for (size_t k = 0; k < n; ++k) position[KeyOf(plan.actions[k])] = k;
  std::vector<size_t> thread_of(n, 0);
  plan.per_thread.resize(order.per_thread.size());
  for (size_t t = 0; t < order.per_thread.size(); ++t) {
    for (const Action& a : order.per_thread[t]) {
      const size_t k = position.at(KeyOf(a));
      plan.per_thread[t].push_back(k);
      thread_of[k] = t;
    }
  }
  plan.waits_for.resize(n);
  plan.wakes.resize(n);
  for (size_t k = 0; k < n; ++k) {
    for (const Action& need : dependencies(plan.actions[k])) {
      auto it = position.find(KeyOf(need));
      if (it == position.end()) continue;  // another process's, or already done
      plan.waits_for[k].push_back(it->second);
      std::vector<size_t>& wakes = plan.wakes[it->second];
      const size_t t = thread_of[k];
      if (t != thread_of[it->second] && std::find(wakes.begin(), wakes.end(), t) == wakes.end())
        wakes.push_back(t);
    }
  }
  return plan;
}

void Execute(const ExecutionPlan& plan, const std::vector<std::unique_ptr<Worker>>& workers,
             const std::function<void(const Action&)>& run, std::optional<size_t> shared_threads) {
  Progress progress(plan);
  std::vector<std::future<void>> finished;
  const size_t threads = plan.per_thread.size();
  if (shared_threads && *shared_threads < threads) {
    for (size_t u = 0; u < std::max<size_t>(1, *shared_threads); ++u)
      finished.push_back(workers.at(u)->Submit([&] { RunSharedThread(plan, progress, run); }));
  } else {
    for (size_t t = 0; t < threads; ++t) {
      if (plan.per_thread[t].empty()) continue;
      finished.push_back(workers.at(t)->Submit([&, t] { RunOwnThread(plan, t, progress, run); }));
    }
  }
  WaitAll(finished);  // the bodies catch everything: this only waits
  for (const std::exception_ptr& failure : progress.failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

}  // namespace gpipe
