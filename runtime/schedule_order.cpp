#include "runtime/schedule_order.h"

#include <algorithm>
#include <tuple>

#include "runtime/schedule_validate.h"

namespace gpipe {

ActionOrder OrderActions(const Schedule& schedule, const StageFlow& flow,
                         const std::vector<std::optional<size_t>>& thread_of_stage,
                         size_t num_threads, const std::function<bool(const Action&)>& keep) {
  const ScheduleStats stats = ValidateSchedule(schedule, flow);
  struct Timed {
    size_t step;
    size_t worker;
    Action action;
  };
  std::vector<Timed> timed;
  for (size_t worker = 0; worker < schedule.actions.size(); ++worker) {
    for (size_t k = 0; k < schedule.actions[worker].size(); ++k) {
      const Action& action = schedule.actions[worker][k];
      if (!thread_of_stage.at(action.stage) || !keep(action)) continue;
      timed.push_back({*stats.start_step[worker][k], worker, action});
    }
  }
  std::stable_sort(timed.begin(), timed.end(), [](const Timed& a, const Timed& b) {
    return std::tie(a.step, a.worker) < std::tie(b.step, b.worker);
  });
  ActionOrder order;
  order.per_thread.resize(num_threads);
  for (const Timed& t : timed) {
    order.per_thread.at(*thread_of_stage[t.action.stage]).push_back(t.action);
    order.global.push_back(t.action);
  }
  return order;
}

}  // namespace gpipe
