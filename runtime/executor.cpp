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
  const uint64_t kind = a.kind == ActionKind::kBackward ? static_cast<uint64_t>(ActionKind::kBackwardInput)
                                                        : static_cast<uint64_t>(a.kind);
  return (kind << 56) | (static_cast<uint64_t>(a.stage) << 32) | static_cast<uint64_t>(a.micro_batch);
}

// Shared by every thread of one Execute call; guarded by `mutex`.
struct Progress {
  explicit Progress(size_t actions, size_t threads) : done(actions, 0), wake(threads) {}
  std::mutex mutex;
  std::vector<char> done;                      // per action
  std::vector<std::condition_variable> wake;   // per thread
  std::vector<std::exception_ptr> failures;    // per action, only once something failed
  bool failed = false;
};

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
      if (t != thread_of[it->second] &&
          std::find(wakes.begin(), wakes.end(), t) == wakes.end())
        wakes.push_back(t);
    }
  }
  return plan;
}

void Execute(const ExecutionPlan& plan, const std::vector<std::unique_ptr<Worker>>& workers,
             const std::function<void(const Action&)>& run) {
  Progress progress(plan.actions.size(), plan.per_thread.size());
  auto ready = [&](size_t k) {
    for (size_t need : plan.waits_for[k]) {
      if (!progress.done[need]) return false;
    }
    return true;
  };
  std::vector<std::future<void>> finished;
  for (size_t t = 0; t < plan.per_thread.size(); ++t) {
    if (plan.per_thread[t].empty()) continue;
    finished.push_back(workers.at(t)->Submit([&, t] {
      for (size_t k : plan.per_thread[t]) {
        {
          std::unique_lock<std::mutex> lock(progress.mutex);
          progress.wake[t].wait(lock, [&] { return progress.failed || ready(k); });
          if (progress.failed) return;  // skip the rest: a task failed
        }
        try {
          run(plan.actions[k]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(progress.mutex);
          if (progress.failures.empty()) progress.failures.resize(plan.actions.size());
          progress.failures[k] = std::current_exception();
          progress.failed = true;
          for (auto& cv : progress.wake) cv.notify_all();
          return;
        }
        {
          std::lock_guard<std::mutex> lock(progress.mutex);
          progress.done[k] = 1;
        }
        for (size_t other : plan.wakes[k]) progress.wake[other].notify_one();
      }
    }));
  }
  WaitAll(finished);  // the bodies catch everything: this only waits
  for (const std::exception_ptr& failure : progress.failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

}  // namespace gpipe
