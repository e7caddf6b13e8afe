#pragma once

#include <cstddef>
#include <functional>
#include <memory>
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
// Threading contract: the plan is read-only while it runs. The done flags,
// the failure and one condition variable per thread live in one Progress
// object on Execute's stack, guarded by its mutex; `run` is called without
// the mutex held, on the worker of the action's thread.
void Execute(const ExecutionPlan& plan, const std::vector<std::unique_ptr<Worker>>& workers,
             const std::function<void(const Action&)>& run);

}  // namespace gpipe
