// The executor: runs a schedule's actions on the workers, each once its
// dependencies are done, and the entry points that pick the actions.

#include "runtime/pipeline_run.h"

#include "runtime/executor.h"
#include "runtime/memory_tracker.h"
#include "runtime/pipeline_error.h"
#include "runtime/schedule_ir.h"
#include "runtime/value_transfer.h"

namespace gpipe {

PipelineRun::PipelineRun(std::shared_ptr<PipelineCore> core, MicroBatches micro_batches,
                         bool needs_grad, DrawKey draws)
    : core_(std::move(core)),
      micro_batches_(std::move(micro_batches)),
      needs_grad_(needs_grad),
      draws_(draws),
      loss_stage_(core_->flow.loss_stage) {
  const size_t m = micro_batches_.inputs.size();
  const size_t num_stages = core_->stages.size();
  slots_.assign(m, std::vector<Slot>(num_stages));
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < num_stages; ++j) {
      slots_[i][j].checkpointed = needs_grad_ && IsCheckpointed(core_->checkpoint, i);
    }
  }
  // Forward-only runs (inference) defer nothing: their slots stay null.
  deferred_weight_grads_.resize(num_stages);
  for (size_t j = 0; j < num_stages && needs_grad_; ++j) {
    std::vector<at::Tensor> parameters;
    if (core_->ranks.IsLocal(j) && core_->batch_weight_gradients) {
      for (const at::Tensor& p : core_->stages[j].module.parameters()) parameters.push_back(p);
    }
    deferred_weight_grads_[j] = c10::make_intrusive<DeferredWeightGrads>(parameters, m);
  }
  weight_gradients_done_.assign(num_stages, 0);
}

c10::IValue PipelineRun::SourceValue(size_t i, const ValueSource& source) const {
  if (source.origin == ValueSource::Origin::ModelInput)
    return micro_batches_.inputs[i][source.index];
  return slots_[i][source.stage].outputs[source.index];
}

namespace {
bool IsForward(const Action& action) { return IsForwardDirection(action.kind); }
}  // namespace

void PipelineRun::Forward() {
  Execute(core_->PlanFor(core_->ScheduleFor("gpipe", slots_.size()),
                         PipelineCore::ActionSubset::kForwards, false));
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
        AddGrad(slots_[i][source.stage].output_grads[source.index], parts[i],
                core_->stages[source.stage].device);
      } else {
        AddGrad(input_grads_[i][source.index], parts[i], InputDevice(source.index));
      }
    }
  }
  SendModelOutputGrads(output_grads);
  Execute(core_->PlanFor(core_->ScheduleFor("gpipe", m), PipelineCore::ActionSubset::kBackwards,
                         false));
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
    Execute(core_->PlanFor(schedule, PipelineCore::ActionSubset::kAll, true));
  } catch (...) {
    loss_ = nullptr;
    throw;
  }
  loss_ = nullptr;
  double total = 0.0;                           // this rank's: 0 except on the loss's rank
  for (double value : losses_) total += value;  // in micro-batch order: the same sum every run
  return total;
}

void PipelineRun::RunAction(const Action& action) {
  const size_t i = action.micro_batch;
  const size_t j = action.stage;
  MemoryTracker::StageScope memory(j);
  TaskRecord record{j, i, TaskRecord::Phase::Forward, *core_->worker_of_stage[j], 0, 0};
  const bool tracing = core_->trace.enabled();
  if (tracing) record.start_ns = TaskTrace::NowNs();
  if (IsCommunication(action.kind)) {
    RunCommunication(action);
  } else if (action.kind == ActionKind::kForward) {
    {
      MemoryTracker::ForwardScope kept(j);
      RunForwardTask(i, j);
    }
    if (loss_ && j == loss_stage_) {
      try {
        RunLoss(i);
      } catch (...) {
        throw LossFailure{std::current_exception()};
      }
    }
  } else {
    RunBackwardTask(i, j, action.kind);
  }
  if (tracing) {
    switch (action.kind) {
      case ActionKind::kSendForward:
      case ActionKind::kSendBackward:
        record.phase = TaskRecord::Phase::Send;
        break;
      case ActionKind::kRecvForward:
      case ActionKind::kRecvBackward:
        record.phase = TaskRecord::Phase::Receive;
        break;
      case ActionKind::kForward:
        record.phase = TaskRecord::Phase::Forward;
        break;
      case ActionKind::kBackward:
        record.phase = TaskRecord::Phase::Backward;
        break;
      case ActionKind::kBackwardInput:
        record.phase = TaskRecord::Phase::BackwardInput;
        break;
      case ActionKind::kBackwardWeight:
        record.phase = TaskRecord::Phase::BackwardWeight;
        break;
    }
    record.end_ns = TaskTrace::NowNs();
    core_->trace.Record(record);
  }
}

void PipelineRun::Execute(const ExecutionPlan& plan) {
  std::lock_guard<std::mutex> one_schedule_at_a_time(core_->run_mutex);
  PlanReceivesAhead(plan);
  gpipe::Execute(
      plan, core_->workers,
      [this](const Action& a) {
        try {
          RunAction(a);
        } catch (
            const LossFailure& failure) {  // the caller's loss: its own message, no stage named
          std::rethrow_exception(failure.cause);
        } catch (const std::exception& e) {
          throw PipelineError(a.stage, a.micro_batch, IsForward(a) ? "forward" : "backward", e);
        }
      },
      core_->shared_threads);
  if (core_->peers) core_->peers->WaitSends();
}

}  // namespace gpipe
