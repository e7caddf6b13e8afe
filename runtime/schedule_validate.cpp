// Schedule validation in two parts. First the lists are checked as sets:
// every action in range and on the worker that owns its stage, none twice,
// and each (stage, micro-batch) done exactly once (F plus B, or F plus I and
// W), with the SEND/RECV actions its ranks need. Then they are run on a
// unit-cost clock, as PyTorch's `_simulate_comms_compute`: at each step
// every worker starts its next action if all of that action's dependencies
// finished in an earlier step. A step in which no worker can start while
// some still have actions left is a deadlock, since nothing that could
// unblock them will ever run. For
//
//   worker 0: 0F0 0B0 0F1 0B1
//   worker 1: 1F1 1F0 1B0 1B1
//
// step 0 runs 0F0, then worker 0 waits at 0B0 for 1B0 while worker 1 waits
// at 1F1 for 0F1, which worker 0 will only reach after 0B0.

#include "runtime/schedule_validate.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <c10/util/Exception.h>

namespace gpipe {
namespace {

// Where an action sits: worker and index in that worker's list.
struct Position {
  size_t worker;
  size_t index;
};

std::string Named(ActionKind kind, size_t stage, size_t micro_batch) {
  return ToString(Action{kind, stage, micro_batch});
}

std::string WorkerList(size_t worker) { return "worker " + std::to_string(worker) + "'s list"; }

class ScheduleChecker {
 public:
  ScheduleChecker(const Schedule& schedule, const StageFlow& flow)
      : schedule_(schedule),
        stages_(schedule.num_stages),
        micro_batches_(schedule.num_micro_batches),
        position_(kNumActionKinds * stages_ * micro_batches_),
        flow_(flow) {}

  ScheduleStats Run() {
    CheckShape();
    IndexActions();
    CheckComplete();
    CheckCommunication();
    CheckWeightsFollowInputs();
    ScheduleStats stats;
    Simulate(&stats);
    CountInFlight(&stats);
    return stats;
  }

 private:
  size_t Slot(ActionKind kind, size_t stage, size_t micro_batch) const {
    return (static_cast<size_t>(kind) * stages_ + stage) * micro_batches_ + micro_batch;
  }
  const std::optional<Position>& PositionOf(ActionKind kind, size_t stage, size_t mb) const {
    return position_[Slot(kind, stage, mb)];
  }
  bool Has(ActionKind kind, size_t stage, size_t mb) const {
    return PositionOf(kind, stage, mb).has_value();
  }

  void CheckShape() const {
    const std::string prefix = "schedule '" + schedule_.name + "' ";
    if (schedule_.actions.size() != schedule_.num_workers) {
      throw std::invalid_argument(prefix + "has " + std::to_string(schedule_.actions.size()) +
                                  " action lists for " + std::to_string(schedule_.num_workers) +
                                  " workers; give one list per worker");
    }
    if (schedule_.worker_of_stage.size() != stages_) {
      throw std::invalid_argument(prefix + "places " +
                                  std::to_string(schedule_.worker_of_stage.size()) +
                                  " stages on workers but has " + std::to_string(stages_) +
                                  "; give worker_of_stage one entry per stage");
    }
    if (flow_.num_stages != stages_ || flow_.reads_from.size() != stages_ ||
        flow_.read_by.size() != stages_ || flow_.feeds_loss.size() != stages_) {
      throw std::invalid_argument(
          prefix + "has " + std::to_string(stages_) + " stages but the data flow given has " +
          std::to_string(flow_.num_stages) + "; give a flow of as many stages");
    }
    if (!schedule_.rank_of_stage.empty() && schedule_.rank_of_stage.size() != stages_) {
      throw std::invalid_argument(prefix + "places " +
                                  std::to_string(schedule_.rank_of_stage.size()) +
                                  " stages on ranks but has " + std::to_string(stages_) +
                                  "; give rank_of_stage one entry per stage");
    }
    for (size_t stage = 0; stage < stages_; ++stage) {
      const size_t worker = schedule_.worker_of_stage[stage];
      if (worker >= schedule_.num_workers) {
        throw std::invalid_argument(
            prefix + "puts stage " + std::to_string(stage) + " on worker " +
            std::to_string(worker) + " but has " + std::to_string(schedule_.num_workers) +
            " workers; use a worker below " + std::to_string(schedule_.num_workers));
      }
    }
  }

  void IndexActions() {
    for (size_t worker = 0; worker < schedule_.num_workers; ++worker) {
      const std::vector<Action>& list = schedule_.actions[worker];
      for (size_t index = 0; index < list.size(); ++index) {
        const Action& action = list[index];
        const std::string text = "action " + ToString(action);
        if (action.stage >= stages_) {
          throw std::invalid_argument(text + " on worker " + std::to_string(worker) +
                                      " names stage " + std::to_string(action.stage) +
                                      " but the schedule has " + std::to_string(stages_) +
                                      " stages; use a stage below " + std::to_string(stages_));
        }
        if (action.micro_batch >= micro_batches_) {
          throw std::invalid_argument(text + " on worker " + std::to_string(worker) +
                                      " names micro-batch " + std::to_string(action.micro_batch) +
                                      " but the schedule has " + std::to_string(micro_batches_) +
                                      " micro-batches; use one below " +
                                      std::to_string(micro_batches_));
        }
        const size_t owner = schedule_.worker_of_stage[action.stage];
        if (owner != worker) {
          throw std::invalid_argument(text + " is on worker " + std::to_string(worker) +
                                      " but stage " + std::to_string(action.stage) +
                                      " belongs to worker " + std::to_string(owner) +
                                      "; move it to " + WorkerList(owner));
        }
        if (IsCommunication(action.kind) && schedule_.rank_of_stage.empty()) {
          throw std::invalid_argument(
              text + " on worker " + std::to_string(worker) +
              " moves values between ranks, but the schedule runs every stage in one process; "
              "remove it (the runtime adds SEND/RECV itself for --ranks)");
        }
        std::optional<Position>& position =
            position_[Slot(action.kind, action.stage, action.micro_batch)];
        if (position) {
          throw std::invalid_argument(text + " appears twice on worker " + std::to_string(worker) +
                                      "; remove one");
        }
        position = Position{worker, index};
      }
    }
  }

  void CheckComplete() const {
    for (size_t stage = 0; stage < stages_; ++stage) {
      const std::string owner_list = WorkerList(schedule_.worker_of_stage[stage]);
      for (size_t mb = 0; mb < micro_batches_; ++mb) {
        auto name = [&](ActionKind kind) { return Named(kind, stage, mb); };
        const bool has_b = Has(ActionKind::kBackward, stage, mb);
        const bool has_i = Has(ActionKind::kBackwardInput, stage, mb);
        const bool has_w = Has(ActionKind::kBackwardWeight, stage, mb);
        if (!Has(ActionKind::kForward, stage, mb)) {
          throw std::invalid_argument("schedule is missing " + name(ActionKind::kForward) +
                                      "; add it to " + owner_list);
        }
        if (has_b && (has_i || has_w)) {
          const ActionKind split = has_i ? ActionKind::kBackwardInput : ActionKind::kBackwardWeight;
          throw std::invalid_argument("schedule has both " + name(ActionKind::kBackward) + " and " +
                                      name(split) + "; use B alone, or I and W");
        }
        if (!has_b && !has_i && !has_w) {
          throw std::invalid_argument("schedule is missing " + name(ActionKind::kBackward) +
                                      "; add it (or " + name(ActionKind::kBackwardInput) + " and " +
                                      name(ActionKind::kBackwardWeight) + ") to " + owner_list);
        }
        const std::string input = name(ActionKind::kBackwardInput);
        const std::string weight = name(ActionKind::kBackwardWeight);
        if (has_i && !has_w) {
          throw std::invalid_argument("schedule has " + input + " but no " + weight + "; add " +
                                      weight + " after " + input + " to " + owner_list);
        }
        if (has_w && !has_i) {
          throw std::invalid_argument("schedule has " + weight + " but no " + input + "; add " +
                                      input + " before " + weight + " to " + owner_list);
        }
      }
    }
  }

  // Exactly the SEND/RECV actions AddCommunication would insert: a value
  // sent that nobody receives, or a receive nobody answers, would hang a run.
  void CheckCommunication() const {
    if (schedule_.rank_of_stage.empty()) return;
    const auto& ranks = schedule_.rank_of_stage;
    for (size_t stage = 0; stage < stages_; ++stage) {
      const bool reads_remote = ReadsFromAnotherRank(stage, flow_, ranks);
      const bool read_remote = ReadByAnotherRank(stage, flow_, ranks);
      const std::string owner_list = WorkerList(schedule_.worker_of_stage[stage]);
      for (size_t mb = 0; mb < micro_batches_; ++mb) {
        const ActionKind backward = Has(ActionKind::kBackwardInput, stage, mb)
                                        ? ActionKind::kBackwardInput
                                        : ActionKind::kBackward;
        struct Expected {
          ActionKind kind;
          bool needed;
          ActionKind next_to;
          const char* where;
          const char* why;
        };
        const Expected expected[] = {
            {ActionKind::kRecvForward, reads_remote, ActionKind::kForward, " before ",
             " reads an output of a stage on another rank"},
            {ActionKind::kSendForward, read_remote, ActionKind::kForward, " after ",
             "'s outputs are read on another rank"},
            {ActionKind::kRecvBackward, read_remote, backward, " before ",
             "'s outputs are read on another rank"},
            {ActionKind::kSendBackward, reads_remote, backward, " after ",
             " reads an output of a stage on another rank"},
        };
        for (const Expected& e : expected) {
          const std::string name = Named(e.kind, stage, mb);
          const std::string who = "stage " + std::to_string(stage);
          if (e.needed && !Has(e.kind, stage, mb)) {
            throw std::invalid_argument("schedule is missing " + name + " (" + who + e.why +
                                        "); add it" + e.where + Named(e.next_to, stage, mb) +
                                        " to " + owner_list);
          }
          if (!e.needed && Has(e.kind, stage, mb)) {
            throw std::invalid_argument("schedule has " + name + " but " + who + "'s values for " +
                                        "that direction stay on its rank; remove it");
          }
        }
      }
    }
  }

  // The simulation would report this as a deadlock; a direct message is
  // clearer.
  void CheckWeightsFollowInputs() const {
    for (size_t stage = 0; stage < stages_; ++stage) {
      for (size_t mb = 0; mb < micro_batches_; ++mb) {
        const std::optional<Position>& input = PositionOf(ActionKind::kBackwardInput, stage, mb);
        const std::optional<Position>& weight = PositionOf(ActionKind::kBackwardWeight, stage, mb);
        if (input && weight && weight->index < input->index) {
          const std::string w = Named(ActionKind::kBackwardWeight, stage, mb);
          const std::string i = Named(ActionKind::kBackwardInput, stage, mb);
          throw std::invalid_argument(w + " comes before " + i + " on worker " +
                                      std::to_string(weight->worker) + "; move " + w + " after " +
                                      i);
        }
      }
    }
  }

  // What `action` waits for: the rule the executor runs too, over a chain.
  std::vector<Action> DependenciesOf(const Action& action) const {
    return ActionDependencies(
        action, flow_, schedule_.rank_of_stage, [this](size_t stage, size_t mb) {
          // The stage hands back its input gradient from B or from I, whichever
          // it runs (CheckComplete made that exactly one).
          return Has(ActionKind::kBackwardInput, stage, mb) ? ActionKind::kBackwardInput
                                                            : ActionKind::kBackward;
        });
  }

  void Simulate(ScheduleStats* stats) const {
    const size_t workers = schedule_.num_workers;
    std::vector<std::optional<size_t>> finish_step(position_.size());
    std::vector<size_t> next(workers, 0);
    stats->start_step.resize(workers);
    size_t remaining = 0;
    for (size_t worker = 0; worker < workers; ++worker) {
      stats->start_step[worker].resize(schedule_.actions[worker].size());
      remaining += schedule_.actions[worker].size();
    }
    size_t computing = 0;  // actions that compute (every one but SEND/RECV)
    for (const std::vector<Action>& list : schedule_.actions) {
      for (const Action& action : list) computing += !IsCommunication(action.kind);
    }

    // The first unfinished dependency of `action` as of `step`, if any.
    auto blocker = [&](const Action& action, size_t step) -> std::optional<Action> {
      for (const Action& need : DependenciesOf(action)) {
        const std::optional<size_t>& done =
            finish_step[Slot(need.kind, need.stage, need.micro_batch)];
        if (!done || *done > step) return need;
      }
      return std::nullopt;
    };

    size_t step = 0;
    for (; remaining > 0; ++step) {
      // Decide every worker's move before recording any, so an action
      // started in this step cannot unblock another in the same step.
      std::vector<size_t> starting;
      for (size_t worker = 0; worker < workers; ++worker) {
        const std::vector<Action>& list = schedule_.actions[worker];
        if (next[worker] < list.size() && !blocker(list[next[worker]], step)) {
          starting.push_back(worker);
        }
      }
      if (starting.empty()) ThrowDeadlock(next, blocker, step);
      for (size_t worker : starting) {
        const Action& action = schedule_.actions[worker][next[worker]];
        finish_step[Slot(action.kind, action.stage, action.micro_batch)] = step + 1;
        stats->start_step[worker][next[worker]] = step;
        ++next[worker];
        --remaining;
      }
    }
    stats->time_steps = step;
    const size_t slots = workers * step;
    stats->bubble_fraction =
        slots == 0 ? 0.0 : static_cast<double>(slots - computing) / static_cast<double>(slots);
  }

  template <typename Blocker>
  [[noreturn]] void ThrowDeadlock(const std::vector<size_t>& next, const Blocker& blocker,
                                  size_t step) const {
    std::string message = "schedule deadlocks:";
    const char* separator = " ";
    for (size_t worker = 0; worker < schedule_.num_workers; ++worker) {
      const std::vector<Action>& list = schedule_.actions[worker];
      if (next[worker] >= list.size()) continue;
      const Action& waiting = list[next[worker]];
      message += separator;
      message += "worker " + std::to_string(worker) + " waits at " + ToString(waiting) + " for " +
                 ToString(*blocker(waiting, step));
      separator = ", ";
    }
    throw std::invalid_argument(message);
  }

  // In-flight depends only on each worker's own order: F adds a pair, the
  // action that releases its activations (B, or W when split) removes it.
  void CountInFlight(ScheduleStats* stats) const {
    for (const std::vector<Action>& list : schedule_.actions) {
      size_t in_flight = 0;
      size_t peak = 0;
      for (const Action& action : list) {
        if (action.kind == ActionKind::kForward) {
          peak = std::max(peak, ++in_flight);
        } else if (action.kind == ActionKind::kBackward ||
                   action.kind == ActionKind::kBackwardWeight) {
          --in_flight;
        }
      }
      stats->peak_in_flight.push_back(peak);
    }
  }

  const Schedule& schedule_;
  const size_t stages_;
  const size_t micro_batches_;
  std::vector<std::optional<Position>> position_;  // by Slot
  const StageFlow& flow_;
};

}  // namespace

ScheduleStats ValidateSchedule(const Schedule& schedule) {
  return ValidateSchedule(schedule, StageFlow::Chain(schedule.num_stages));
}

ScheduleStats ValidateSchedule(const Schedule& schedule, const StageFlow& flow) {
  return ScheduleChecker(schedule, flow).Run();
}

void CheckScheduleFits(const std::string& name, size_t stages, size_t micro_batches,
                       size_t virtual_stages) {
  try {
    ValidateSchedule(BuildSchedule(name, stages, micro_batches, virtual_stages));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
}

}  // namespace gpipe
