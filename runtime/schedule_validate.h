#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "runtime/schedule_ir.h"

namespace gpipe {

struct ScheduleStats {
  size_t time_steps = 0;  // until the last action finishes
  // Worker-steps without computation / (workers * time_steps): a SEND/RECV
  // takes a step of the simulated clock but counts as idle.
  double bubble_fraction = 0.0;
  // Per worker: the most (stage, micro-batch) pairs whose forward ran on it
  // and whose backward (B, or W when split) had not finished. Counting pairs
  // rather than micro-batches matters only for interleaved schedules, where a
  // pair holds one chunk's activations.
  std::vector<size_t> peak_in_flight;
  // Per worker per action: the time step it starts at. Always set when
  // ValidateSchedule returns (it throws on a deadlock); optional because
  // while the simulation runs, actions not yet reached have no step.
  std::vector<std::vector<std::optional<size_t>>> start_step;
};

// Checks a schedule and simulates it: every action takes one time step, and
// a worker starts its next action as soon as that action's dependencies have
// finished in an earlier step. Dependencies: F(s,m) needs F(s-1,m); B or I of
// (s,m) needs F(s,m) and the B or I of (s+1,m) (the last stage only its own
// F, whose output the loss consumes); W(s,m) needs I(s,m).
//
// Throws std::invalid_argument with a one-line message naming the action and
// the fix when: an action names a stage or micro-batch out of range, sits on
// a worker that does not own its stage, or appears twice; a (stage,
// micro-batch) lacks F, or lacks both B and the pair I + W, or has B and
// I/W; a W precedes its I; or the lists deadlock ("schedule deadlocks:
// worker 0 waits at 0B0 for 1B0, worker 1 waits at 1F1 for 0F1").
//
// A schedule placed on several ranks (rank_of_stage set) must carry the
// SEND/RECV actions AddCommunication inserts, exactly those (a missing or
// extra one is named); a receive waits for its sends, and sends never wait
// (c10d's are asynchronous). Without ranks, a SEND/RECV is an error.
// `flow`: what each stage reads (skip routes); a chain when not given.
ScheduleStats ValidateSchedule(const Schedule& schedule);
ScheduleStats ValidateSchedule(const Schedule& schedule, const StageFlow& flow);

// Builds the named schedule for these stages and micro-batches and validates
// it, reporting a schedule that cannot run them (BuildSchedule's and
// ValidateSchedule's messages) as a c10::Error, as the CLIs print errors.
void CheckScheduleFits(const std::string& name, size_t stages, size_t micro_batches,
                       size_t virtual_stages);

}  // namespace gpipe
