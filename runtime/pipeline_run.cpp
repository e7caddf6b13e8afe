// The executor: runs a schedule's actions on the workers, each once its
// dependencies are done, and the entry points that pick the actions.

#include "runtime/pipeline_run.h"

#include <map>
#include <set>
#include <tuple>

#include "runtime/memory_tracker.h"
#include "runtime/pipeline_error.h"
#include "runtime/schedule_ir.h"
#include "runtime/value_transfer.h"

namespace gpipe {

PipelineRun::PipelineRun(std::shared_ptr<PipelineCore> core, MicroBatches micro_batches,
                         bool needs_grad)
    : core_(std::move(core)), micro_batches_(std::move(micro_batches)), needs_grad_(needs_grad) {
  const size_t m = micro_batches_.inputs.size();
  const size_t num_stages = core_->stages.size();
  slots_.assign(m, std::vector<Slot>(num_stages));
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < num_stages; ++j) {
      slots_[i][j].checkpointed = needs_grad_ && IsCheckpointed(core_->checkpoint, i, m);
    }
  }
  producers_.resize(num_stages);
  consumers_.resize(num_stages);
  for (size_t j = 0; j < num_stages; ++j) {
    std::set<size_t> from;
    for (const ValueSource& source : core_->stages[j].inputs) {
      if (source.origin == ValueSource::Origin::StageOutput) from.insert(source.stage);
    }
    for (size_t p : from) {
      producers_[j].push_back(p);
      consumers_[p].push_back(j);
    }
  }
  produces_output_.assign(num_stages, false);
  for (const ValueSource& source : core_->manifest.outputs) {
    if (source.origin != ValueSource::Origin::StageOutput) continue;
    produces_output_[source.stage] = true;
    loss_stage_ = std::max(loss_stage_.value_or(0), static_cast<size_t>(source.stage));
  }
  progress_.forward_done.assign(m, std::vector<bool>(num_stages, false));
  progress_.input_grads_done.assign(m, std::vector<bool>(num_stages, false));
  progress_.loss_done.assign(m, false);
}

c10::IValue PipelineRun::SourceValue(size_t i, const ValueSource& source) const {
  if (source.origin == ValueSource::Origin::ModelInput)
    return micro_batches_.inputs[i][source.index];
  return slots_[i][source.stage].outputs[source.index];
}

ActionOrder PipelineRun::OrderFor(const Schedule& schedule,
                                  const std::function<bool(const Action&)>& keep) const {
  return OrderActions(schedule, core_->worker_of_stage, core_->workers.size(), keep);
}

namespace {
bool IsForward(const Action& action) { return action.kind == ActionKind::kForward; }
}  // namespace

bool PipelineRun::TakesRngToken(const Action& action) const {
  return IsForward(action) &&
         (core_->stages[action.stage].uses_rng || (loss_ && action.stage == loss_stage_));
}

void PipelineRun::ExecuteOnEveryRank(const Schedule& schedule,
                                     const std::function<bool(const Action&)>& keep) {
  if (core_->ranks.distributed()) {
    // Every rank's random tasks, in the order all ranks agree on.
    std::vector<std::optional<size_t>> everywhere(core_->stages.size(), 0);
    PlanRngRelay(OrderActions(schedule, everywhere, 1, keep).global);
  }
  Execute(OrderFor(schedule, keep));
  if (rng_home_from_) ReceiveRngState(*rng_home_from_, rng_home_hop_);
}

void PipelineRun::Forward() {
  ExecuteOnEveryRank(BuildGpipe(core_->stages.size(), slots_.size()), IsForward);
  ReceiveModelOutputs();
}

std::vector<at::Tensor> PipelineRun::Backward(const std::vector<at::Tensor>& output_grads) {
  TORCH_CHECK(
      core_->schedule == "gpipe", "this pipeline trains with schedule '", core_->schedule,
      "', which runs each micro-batch's backward amid the others' forwards: train it with "
      "train_step(inputs, a loss per micro-batch); forward() then backward() runs gpipe only");
  const size_t m = slots_.size();
  const size_t num_inputs = micro_batches_.batched.size();
  input_grads_.assign(m, std::vector<at::Tensor>(num_inputs));
  for (size_t k = 0; k < output_grads.size(); ++k) {
    const ValueSource& source = core_->manifest.outputs[k];
    if (!output_grads[k].defined() || IsRemote(source)) continue;  // remote: SendModelOutputGrads
    auto parts = output_grads[k].split_with_sizes(micro_batches_.sizes, 0);
    for (size_t i = 0; i < m; ++i) {
      if (source.origin == ValueSource::Origin::StageOutput) {
        AddGrad(slots_[i][source.stage].output_grads[source.index], parts[i], core_->stages[source.stage].device);
      } else {
        AddGrad(input_grads_[i][source.index], parts[i], InputDevice(source.index));
      }
    }
  }
  SendModelOutputGrads(output_grads);
  Execute(
      OrderFor(BuildGpipe(core_->stages.size(), m), [](const Action& a) { return !IsForward(a); }));
  std::vector<at::Tensor> result(num_inputs);
  for (size_t k = 0; k < num_inputs; ++k) {
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i < m; ++i) parts.push_back(input_grads_[i][k]);
    bool none = true;
    for (const auto& p : parts) none = none && !p.defined();
    if (none) continue;
    if (!micro_batches_.batched[k]) {  // given whole to every micro-batch: gradients add up
      at::Tensor sum;
      for (const auto& p : parts) AddGrad(sum, p, InputDevice(k));
      result[k] = sum;
      continue;
    }
    for (size_t i = 0; i < m; ++i) {
      if (!parts[i].defined()) parts[i] = at::zeros_like(micro_batches_.inputs[i][k].toTensor());
    }
    result[k] = Gather(parts);
  }
  return result;
}

double PipelineRun::TrainStep(const Schedule& schedule, const RunMicroBatchLoss& loss) {
  TORCH_CHECK(loss_stage_.has_value(), "the model returns no stage output to compute a loss from");
  // The model's outputs travel to the rank of the last stage (RankPlan); the
  // loss runs there, in the forward of the last stage producing an output.
  TORCH_CHECK(core_->ranks.rank_of(*loss_stage_) == core_->ranks.output_rank(), "stage ",
              *loss_stage_, " computes the model's last output, but rank ",
              core_->ranks.output_rank(), " runs the last stage, ", core_->stages.size() - 1,
              ", which feeds no output; assign the last stages to one rank with --ranks");
  const size_t m = slots_.size();
  input_grads_.assign(m, std::vector<at::Tensor>(micro_batches_.batched.size()));
  losses_.assign(m, 0.0);
  loss_ = &loss;
  try {
    ExecuteOnEveryRank(schedule, [](const Action&) { return true; });
  } catch (...) {
    loss_ = nullptr;
    throw;
  }
  loss_ = nullptr;
  double total = 0.0;                           // this rank's: 0 except on the loss's rank
  for (double value : losses_) total += value;  // in micro-batch order: the same sum every run
  return total;
}

bool PipelineRun::WaitForDependencies(const Action& action) {
  const size_t i = action.micro_batch;
  const size_t j = action.stage;
  const size_t num_stages = core_->stages.size();
  auto local = [&](size_t stage) { return core_->ranks.IsLocal(stage); };
  auto ready = [&]() -> bool {
    if (progress_.failed) return true;
    switch (action.kind) {
      case ActionKind::kForward:
        // Its producers, and the previous stage: the order the schedule was validated in.
        if (j > 0 && local(j - 1) && !progress_.forward_done[i][j - 1]) return false;
        for (size_t p : producers_[j]) {
          if (local(p) && !progress_.forward_done[i][p]) return false;
        }
        return true;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        if (!progress_.forward_done[i][j]) return false;
        if (j + 1 < num_stages && local(j + 1) && !progress_.input_grads_done[i][j + 1])
          return false;
        for (size_t c : consumers_[j]) {
          if (local(c) && !progress_.input_grads_done[i][c]) return false;
        }
        // The loss's gradient: here once the loss is done, or a message from its rank.
        return !(loss_ && produces_output_[j] && local(*loss_stage_) && !progress_.loss_done[i]);
      case ActionKind::kBackwardWeight:
        return static_cast<bool>(progress_.input_grads_done[i][j]);
    }
    return true;
  };
  std::unique_lock<std::mutex> lock(progress_.mutex);
  progress_.changed.wait(lock, ready);
  return !progress_.failed;
}

void PipelineRun::MarkDone(const Action& action) {
  {
    std::lock_guard<std::mutex> lock(progress_.mutex);
    const size_t i = action.micro_batch;
    if (action.kind == ActionKind::kForward) {
      progress_.forward_done[i][action.stage] = true;
      if (loss_ && action.stage == loss_stage_) progress_.loss_done[i] = true;
    } else if (action.kind != ActionKind::kBackwardWeight) {
      progress_.input_grads_done[i][action.stage] = true;
    }
  }
  progress_.changed.notify_all();
}

void PipelineRun::RunAction(const Action& action, std::optional<uint64_t> ticket) {
  const size_t i = action.micro_batch;
  const size_t j = action.stage;
  MemoryTracker::StageScope memory(j);
  static const std::map<ActionKind, TaskRecord::Phase> kPhase = {
      {ActionKind::kForward, TaskRecord::Phase::Forward},
      {ActionKind::kBackward, TaskRecord::Phase::Backward},
      {ActionKind::kBackwardInput, TaskRecord::Phase::BackwardInput},
      {ActionKind::kBackwardWeight, TaskRecord::Phase::BackwardWeight}};
  TaskRecord record{j, i, kPhase.at(action.kind), *core_->worker_of_stage[j], 0, 0};
  const bool tracing = core_->trace.enabled();
  if (tracing) record.start_ns = TaskTrace::NowNs();
  // The task's turn on the generator: first, so that it is never skipped.
  std::optional<RngTurnstile::Turn> turn;
  if (ticket) turn.emplace(core_->turnstile, *ticket);
  if (action.kind == ActionKind::kForward) {
    Slot& slot = slots_[i][j];
    if (slot.rng_from) ReceiveRngState(*slot.rng_from, slot.rng_hop);
    {
      MemoryTracker::ForwardScope kept(j);
      RunForwardTask(i, j);
    }
    if (loss_ && j == loss_stage_) {
      try {
        RunLoss(i);  // it may draw too: inside this task's turn, before the state moves on
      } catch (...) {
        throw LossFailure{std::current_exception()};
      }
    }
    if (slot.rng_to) SendRngState(*slot.rng_to, slot.rng_hop + 1);
    SendOutputs(i, j);
  } else {
    RunBackwardTask(i, j, action.kind);
  }
  if (tracing) {
    record.end_ns = TaskTrace::NowNs();
    core_->trace.Record(record);
  }
}

void PipelineRun::Fail() {
  {
    std::lock_guard<std::mutex> lock(progress_.mutex);
    progress_.failed = true;
  }
  progress_.changed.notify_all();
}

void PipelineRun::Execute(const ActionOrder& order) {
  std::lock_guard<std::mutex> one_schedule_at_a_time(core_->run_mutex);
  core_->turnstile.Reset();
  // Each action's place in the order all threads agree on, and its ticket:
  // random draws happen in that order in every run (a backward takes a turn
  // only to recompute), and the failure reported is the first in it (e.g. the
  // first stage and micro-batch to produce a NaN), whichever thread met it first.
  struct Place {
    size_t position;
    std::optional<uint64_t> ticket;
  };
  std::map<std::tuple<ActionKind, size_t, size_t>, Place> places;
  for (size_t k = 0; k < order.global.size(); ++k) {
    const Action& a = order.global[k];
    const Stage& stage = core_->stages[a.stage];
    bool takes_turn = false;
    if (a.kind == ActionKind::kForward) {
      takes_turn = TakesRngToken(a);
    } else if (a.kind != ActionKind::kBackwardWeight) {
      takes_turn = stage.uses_rng && slots_[a.micro_batch][a.stage].checkpointed;
    }
    Place& place = places[{a.kind, a.stage, a.micro_batch}];
    place.position = k;
    if (takes_turn) place.ticket = core_->turnstile.TakeTicket();
  }
  {
    std::lock_guard<std::mutex> lock(progress_.mutex);
    progress_.failed = false;
  }
  std::mutex failures_mutex;
  std::map<size_t, std::exception_ptr> failures;  // by position
  std::vector<std::future<void>> done;
  for (size_t thread = 0; thread < order.per_thread.size(); ++thread) {
    for (const Action& a : order.per_thread[thread]) {
      const Place& place = places.at({a.kind, a.stage, a.micro_batch});
      const std::optional<uint64_t> ticket = place.ticket;
      const size_t at = place.position;
      done.push_back(
          core_->workers[thread]->Submit([this, a, ticket, at, &failures, &failures_mutex] {
            if (!WaitForDependencies(a)) {  // a task failed: pass this one's turn on and stop
              if (ticket) RngTurnstile::Turn pass(core_->turnstile, *ticket);
              return;
            }
            try {
              RunAction(a, ticket);
            } catch (
                const LossFailure& failure) {  // the caller's loss: its own message, no stage named
              {
                std::lock_guard<std::mutex> lock(failures_mutex);
                failures[at] = failure.cause;
              }
              Fail();
              return;
            } catch (const std::exception& e) {
              {
                std::lock_guard<std::mutex> lock(failures_mutex);
                failures[at] = std::make_exception_ptr(PipelineError(
                    a.stage, a.micro_batch, IsForward(a) ? "forward" : "backward", e));
              }
              Fail();
              return;
            }
            MarkDone(a);
          }));
    }
  }
  WaitAll(done);
  if (!failures.empty()) std::rethrow_exception(failures.begin()->second);
  if (core_->peers) core_->peers->WaitSends();
}

}  // namespace gpipe
