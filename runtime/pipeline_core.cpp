// PipelineCore's caches of schedules and execution plans.

#include "runtime/pipeline_core.h"

#include "runtime/schedule_lowering.h"
#include "runtime/schedule_validate.h"

namespace gpipe {

const Schedule& PipelineCore::ScheduleFor(const std::string& name, size_t micro_batches) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto key = std::make_tuple(name, micro_batches);
  auto it = schedules.find(key);
  if (it == schedules.end()) {
    // forward() and its backward run gpipe's halves whatever train_step's schedule.
    Schedule schedule = name == "gpipe" ? BuildGpipe(stages.size(), micro_batches)
                                        : BuildSchedule(name, stages.size(), micro_batches, virtual_stages);
    ValidateSchedule(schedule);  // std::invalid_argument, as BuildSchedule's
    it = schedules.emplace(key, std::move(schedule)).first;
  }
  return it->second;
}

const ExecutionPlan& PipelineCore::PlanFor(const Schedule& schedule, ActionSubset subset,
                                           bool loss_in_schedule) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto key = std::make_tuple(schedule.name, schedule.num_stages, schedule.num_micro_batches,
                             schedule.num_workers, static_cast<int>(subset), loss_in_schedule);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  auto keep = [subset](const Action& a) {
    switch (subset) {
      case ActionSubset::kAll: return true;
      case ActionSubset::kForwards:
        return IsForwardDirection(a.kind);
      case ActionSubset::kBackwards:
        return !IsForwardDirection(a.kind);
    }
    return true;
  };
  StageFlow waits = flow;
  if (!loss_in_schedule) waits.loss_stage.reset();
  // Several processes: the values crossing ranks become SEND/RECV actions,
  // checked (ValidateSchedule inside OrderActions) and run like the others.
  const Schedule lowered =
      ranks.distributed() ? AddCommunication(schedule, waits, ranks.rank_of_stage()) : schedule;
  const ActionOrder order = OrderActions(lowered, waits, worker_of_stage, workers.size(), keep);
  ExecutionPlan plan = PlanExecution(order, [&](const Action& a) {
    return ActionDependencies(a, waits, lowered.rank_of_stage,
                              [](size_t, size_t) { return ActionKind::kBackwardInput; });
  });
  return plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace gpipe
