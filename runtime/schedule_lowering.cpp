#include "runtime/schedule_lowering.h"

#include <stdexcept>
#include <string>

namespace gpipe {

Schedule AddCommunication(const Schedule& compute, const StageFlow& flow,
                          const std::vector<int>& rank_of_stage) {
  if (!rank_of_stage.empty() && rank_of_stage.size() != compute.num_stages) {
    throw std::invalid_argument("schedule '" + compute.name + "' has " +
                                std::to_string(compute.num_stages) + " stages but " +
                                std::to_string(rank_of_stage.size()) +
                                " ranks were given; give one rank per stage");
  }
  Schedule lowered = compute;
  lowered.rank_of_stage = rank_of_stage;
  for (std::vector<Action>& list : lowered.actions) {
    std::vector<Action> with_communication;
    with_communication.reserve(list.size());
    for (const Action& action : list) {
      if (IsCommunication(action.kind)) {
        throw std::invalid_argument(
            "schedule '" + compute.name + "' already has " + ToString(action) +
            "; give compute actions only (F, B, I, W): the runtime adds SEND/RECV for --ranks");
      }
      const size_t s = action.stage;
      const size_t m = action.micro_batch;
      const bool reads_remote = ReadsFromAnotherRank(s, flow, rank_of_stage);
      const bool read_remote = ReadByAnotherRank(s, flow, rank_of_stage);
      switch (action.kind) {
        case ActionKind::kForward:
          if (reads_remote) with_communication.push_back({ActionKind::kRecvForward, s, m});
          with_communication.push_back(action);
          if (read_remote) with_communication.push_back({ActionKind::kSendForward, s, m});
          break;
        case ActionKind::kBackward:
        case ActionKind::kBackwardInput:
          if (read_remote) with_communication.push_back({ActionKind::kRecvBackward, s, m});
          with_communication.push_back(action);
          if (reads_remote) with_communication.push_back({ActionKind::kSendBackward, s, m});
          break;
        default:
          with_communication.push_back(action);
      }
    }
    list = std::move(with_communication);
  }
  return lowered;
}

}  // namespace gpipe
