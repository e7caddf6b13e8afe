#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "runtime/schedule_ir.h"

namespace gpipe {

// The order in which one process runs a schedule's actions.
//
// The validator's simulation gives every action a start step, and every
// dependency of an action starts at an earlier step. A thread that runs its
// actions by start step therefore never waits for an action queued behind it
// on its own thread, and neither does any other thread: the action with the
// smallest step still pending can always run. That holds however the
// schedule's workers map onto threads, so a device's thread may run the
// actions of several schedule workers (interleaved stages on one GPU), and a
// CPU stage its own worker's actions alone.
struct ActionOrder {
  // Per thread: its actions by (start step, schedule worker).
  std::vector<std::vector<Action>> per_thread;
  // Every kept action of this process in that same order: the order in which
  // tasks take turns on the random-number generator, so draws do not depend
  // on how threads interleave.
  std::vector<Action> global;
};

// `thread_of_stage[s]`: the thread running stage s, or nullopt where another
// process runs it (its actions are left out). `keep` selects actions (e.g.
// only forwards, for inference). Validates the schedule over `flow`
// (ValidateSchedule's errors); a SEND/RECV runs on its stage's thread.
ActionOrder OrderActions(const Schedule& schedule, const StageFlow& flow,
                         const std::vector<std::optional<size_t>>& thread_of_stage,
                         size_t num_threads, const std::function<bool(const Action&)>& keep);

}  // namespace gpipe
