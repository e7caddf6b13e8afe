#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/schedule_ir.h"
#include "runtime/schedule_order.h"
#include "runtime/worker.h"

namespace gpipe {

// A schedule's actions as one process runs them, with every wait worked out:
// built once per (schedule, micro-batch count, which actions) and reused by
// every step, so a step allocates nothing per action.
struct ExecutionPlan {
  std::vector<Action> actions;                  // in the order all threads agree on
  std::vector<std::vector<size_t>> per_thread;  // per thread: its actions (positions), in order
  std::vector<std::vector<size_t>> waits_for;   // per action: the actions it needs done first
  std::vector<std::vector<size_t>> wakes;       // per action: the other threads that wait for it
};

// `dependencies(action)`: what it waits for (ActionDependencies); those not
// in `order` (another process's, or run by an earlier call) count as done.
// A "B or I" dependency may be given as either kind.
ExecutionPlan PlanExecution(const ActionOrder& order,
                            const std::function<std::vector<Action>(const Action&)>& dependencies);

// Runs every action of `plan` on its thread's worker, each once what it
// waits for is done; `run` is the task body. A finished task wakes only the
// threads that wait for it. When a task throws, tasks not yet started are
// skipped, every thread finishes, and the exception of the earliest failed
// action in plan order is rethrown (so the failure reported does not depend
// on which thread met one first).
//
// `shared_threads` (fewer than the plan's threads): only the first that many
// workers run, and each takes, whenever it is free, the ready action earliest
// in plan order among the threads' next actions. A plan thread's actions
// still run one at a time in its order, so the results are the same; what
// changes is that S stages on fewer cores no longer hand every task to a
// sleeping thread (on a virtual machine, a wake-up across cores costs about
// as much as a small task). Only for tasks that never wait for another
// process: a task blocked on a receive would hold a shared thread.
//
// Threading contract: the plan is read-only while it runs. The done flags,
// the failure, the shared threads' cursors and the condition variables live
// in one Progress object on Execute's stack, guarded by its mutex; `run` is
// called without the mutex held, on a worker's thread.
void Execute(const ExecutionPlan& plan, const std::vector<std::unique_ptr<Worker>>& workers,
             const std::function<void(const Action&)>& run,
             std::optional<size_t> shared_threads = std::nullopt);

}  // namespace gpipe
