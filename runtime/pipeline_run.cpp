#include "runtime/pipeline_run.h"

#include <optional>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "runtime/memory_tracker.h"
#include "runtime/pipeline_error.h"
#include "runtime/recompute.h"
#include "runtime/value_transfer.h"

namespace gpipe {
namespace {

bool CarriesGrad(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().requires_grad();
}

// A stage input as the stage sees it: on the stage's device and, when it
// carries gradient, a fresh leaf so that the stage's graph ends here.
c10::IValue StageInput(const c10::IValue& v, const c10::Device& device, bool carries_grad,
                       CopyStreams& copies) {
  if (!v.isTensor() || !v.toTensor().defined()) return v;
  at::Tensor t = copies.Copy(v.toTensor().detach(), device);  // the copy node of a device boundary
  if (carries_grad) t.requires_grad_(true);
  return t;
}

// --detect-anomaly: the first non-finite tensor stops the run, named.
void CheckFinite(const c10::IValue& v, const char* what, size_t index) {
  if (!v.isTensor() || !v.toTensor().defined()) return;
  const at::Tensor& t = v.toTensor();
  if (!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type())) return;
  TORCH_CHECK(at::isfinite(t).all().item<bool>(), "non-finite values (NaN or Inf) in ", what, " ", index,
              " of this stage (--detect-anomaly: this is the first stage and micro-batch to produce one)");
}

std::string OutputName(size_t stage, int64_t output, size_t micro_batch) {
  return "stage " + std::to_string(stage) + "'s output " + std::to_string(output) + " for micro-batch " +
         std::to_string(micro_batch);
}

}  // namespace

PipelineRun::PipelineRun(std::shared_ptr<PipelineCore> core, MicroBatches micro_batches,
                         bool needs_grad)
    : core_(std::move(core)), micro_batches_(std::move(micro_batches)), needs_grad_(needs_grad) {
  const size_t m = micro_batches_.inputs.size();
  slots_.assign(m, std::vector<Slot>(core_->stages.size()));
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < core_->stages.size(); ++j) {
      slots_[i][j].checkpointed = needs_grad_ && IsCheckpointed(core_->checkpoint, i, m);
    }
  }
}

c10::IValue PipelineRun::SourceValue(size_t i, const ValueSource& source) const {
  if (source.origin == ValueSource::Origin::ModelInput) return micro_batches_.inputs[i][source.index];
  return slots_[i][source.stage].outputs[source.index];
}

// Several processes draw random numbers exactly as one process would: one
// process's stages take turns on its one generator (RngTurnstile), so across
// ranks the generator's state travels as a token, in the same ticket order.
// Its home is the rank holding the outputs (where the loss draws, e.g. a
// random target); it leaves home for the first random task of the forward
// schedule, goes from task to task, and comes home after the last one.
// Hops between tasks of one rank need no message. Recomputation replays
// saved states and does not move the token.
void PipelineRun::PlanRngRelay(const std::vector<std::vector<Task>>& clocks) {
  std::vector<Task> order;
  for (const auto& clock : clocks) {
    for (const Task& t : clock) {
      if (core_->stages[t.stage].uses_rng) order.push_back(t);
    }
  }
  const RankPlan& ranks = core_->ranks;
  const size_t n = order.size();
  auto holder = [&](size_t h) {  // h = 0 and n + 1: home; h = k + 1: task k
    return h == 0 || h == n + 1 ? ranks.output_rank() : ranks.rank_of(order[h - 1].stage);
  };
  for (size_t k = 0; k < n; ++k) {
    if (!ranks.IsLocal(order[k].stage)) continue;
    Slot& slot = slots_[order[k].micro_batch][order[k].stage];
    slot.rng_hop = k;
    if (holder(k) != ranks.rank()) slot.rng_from = holder(k);
    if (holder(k + 2) != ranks.rank()) slot.rng_to = holder(k + 2);
  }
  if (n == 0 || !ranks.HoldsOutputs()) return;
  if (holder(1) != ranks.rank()) SendRngState(holder(1), 0);
  if (holder(n) != ranks.rank()) {
    rng_home_from_ = holder(n);
    rng_home_hop_ = n;
  }
}

void PipelineRun::SendRngState(int peer, size_t hop) {
  core_->peers->Send(CaptureRngState(c10::Device(c10::kCPU)).cpu, peer, 2 * core_->ranks.RngMessage(hop),
                     "the random-number generator's state");
}

void PipelineRun::ReceiveRngState(int peer, size_t hop) {
  RngState state = CaptureRngState(c10::Device(c10::kCPU));  // for its size
  core_->peers->Recv(state.cpu, peer, 2 * core_->ranks.RngMessage(hop), "the random-number generator's state");
  RestoreRngState(state);
}

void PipelineRun::Forward() {
  auto clocks = ForwardClockCycles(slots_.size(), core_->stages.size());
  if (core_->ranks.distributed()) PlanRngRelay(clocks);
  Schedule(clocks, true);
  if (rng_home_from_ >= 0) ReceiveRngState(rng_home_from_, rng_home_hop_);
  ReceiveModelOutputs();
}

bool PipelineRun::IsRemote(const ValueSource& source) const {
  return source.origin == ValueSource::Origin::StageOutput && !core_->ranks.IsLocal(source.stage);
}

// Input n of stage j (forward), or the gradient for it (backward), from the rank that runs its producer.
c10::IValue PipelineRun::ReceiveInput(size_t i, size_t j, size_t n, bool backward) {
  const ValueSource& source = core_->stages[j].inputs[n];
  std::string what = OutputName(source.stage, source.index, i);
  return RecvValue(*core_->peers, core_->ranks.rank_of(source.stage),
                   core_->ranks.Message(backward, i, slots_.size(), j, n), what);
}

void PipelineRun::SendOutputs(size_t i, size_t j) {
  const Slot& slot = slots_[i][j];
  for (const RemoteUse& use : core_->ranks.remote_uses(j)) {
    SendValue(*core_->peers, slot.outputs[use.output], slot.output_requires_grad[use.output], use.rank,
              core_->ranks.Message(false, i, slots_.size(), use.consumer, use.input),
              OutputName(j, use.output, i));
  }
}

// A remote consumer that received an output carrying gradient always answers
// with its gradient (None when it has none), so both sides agree on messages.
void PipelineRun::ReceiveOutputGrads(size_t i, size_t j) {
  Slot& slot = slots_[i][j];
  for (const RemoteUse& use : core_->ranks.remote_uses(j)) {
    if (!slot.output_requires_grad[use.output]) continue;
    c10::IValue grad = RecvValue(*core_->peers, use.rank,
                                 core_->ranks.Message(true, i, slots_.size(), use.consumer, use.input),
                                 "the gradient of " + OutputName(j, use.output, i));
    if (grad.isTensor()) {
      AddGrad(slot.output_grads[use.output], grad.toTensor(), core_->stages[j].device);
    }
  }
}

void PipelineRun::ReceiveModelOutputs() {
  if (!core_->ranks.distributed() || !core_->ranks.HoldsOutputs()) return;
  const auto& outputs = core_->manifest.outputs;
  remote_outputs_.assign(slots_.size(), std::vector<c10::IValue>(outputs.size()));
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!IsRemote(outputs[k])) continue;
    for (size_t i = 0; i < slots_.size(); ++i) {
      remote_outputs_[i][k] = RecvValue(
          *core_->peers, core_->ranks.rank_of(outputs[k].stage),
          core_->ranks.Message(false, i, slots_.size(), RankPlan::kModelOutputs, static_cast<int64_t>(k)),
          OutputName(outputs[k].stage, outputs[k].index, i));
    }
  }
}

void PipelineRun::SendModelOutputGrads(const std::vector<at::Tensor>& output_grads) {
  if (remote_outputs_.empty()) return;
  for (size_t k = 0; k < core_->manifest.outputs.size(); ++k) {
    const ValueSource& source = core_->manifest.outputs[k];
    if (!IsRemote(source)) continue;
    std::vector<at::Tensor> parts(slots_.size());
    if (k < output_grads.size() && output_grads[k].defined()) {
      parts = output_grads[k].split_with_sizes(micro_batches_.sizes, 0);
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!CarriesGrad(remote_outputs_[i][k])) continue;
      SendValue(*core_->peers, parts[i], false, core_->ranks.rank_of(source.stage),
                core_->ranks.Message(true, i, slots_.size(), RankPlan::kModelOutputs, static_cast<int64_t>(k)),
                "the gradient of " + OutputName(source.stage, source.index, i));
    }
  }
}

std::vector<at::Tensor> PipelineRun::OutputParts(size_t k) const {
  std::vector<at::Tensor> parts;
  const ValueSource& source = core_->manifest.outputs[k];
  for (size_t i = 0; i < slots_.size(); ++i) {
    c10::IValue v = IsRemote(source) ? remote_outputs_[i][k] : SourceValue(i, source);
    TORCH_CHECK(v.isTensor() || v.isNone(), "model output ", k, " is a ", v.tagKind(),
                ", not a tensor; a pipelined model must return tensors with a batch dimension");
    parts.push_back(v.isNone() ? at::Tensor() : v.toTensor());
  }
  return parts;
}

void PipelineRun::Schedule(const std::vector<std::vector<Task>>& clocks, bool forward) {
  std::lock_guard<std::mutex> one_schedule_at_a_time(core_->run_mutex);
  core_->turnstile.Reset();
  for (const auto& clock : clocks) {
    std::vector<std::future<void>> done;
    for (const Task& t : clock) {
      if (!core_->ranks.IsLocal(t.stage)) continue;  // another process runs it
      const Stage& stage = core_->stages[t.stage];
      // Tickets follow the schedule order, so random draws happen in the same
      // order in every run. Backward only takes turns to recompute.
      bool takes_turn = stage.uses_rng && (forward || slots_[t.micro_batch][t.stage].checkpointed);
      uint64_t ticket = takes_turn ? core_->turnstile.TakeTicket() : UINT64_MAX;
      auto& worker = *core_->workers[core_->worker_of_stage[t.stage]];
      done.push_back(worker.Submit([this, t, ticket, forward] {
        MemoryTracker::StageScope memory(t.stage);
        TaskRecord record{t.stage, t.micro_batch,
                          forward ? TaskRecord::Phase::Forward : TaskRecord::Phase::Backward,
                          core_->worker_of_stage[t.stage], 0, 0};
        const bool tracing = core_->trace.enabled();
        if (tracing) record.start_ns = TaskTrace::NowNs();
        try {
          if (forward) {
            RunForwardTask(t.micro_batch, t.stage, ticket);
          } else {
            RunBackwardTask(t.micro_batch, t.stage, ticket);
          }
          if (tracing) {
            record.end_ns = TaskTrace::NowNs();
            core_->trace.Record(record);
          }
        } catch (const std::exception& e) {
          throw PipelineError(t.stage, t.micro_batch, forward ? "forward" : "backward", e);
        }
      }));
    }
    WaitAll(done);  // all tasks of a clock finish before the next clock starts
  }
  if (core_->peers) core_->peers->WaitSends();
}

void PipelineRun::RunForwardTask(size_t i, size_t j, uint64_t ticket) {
  std::optional<RngTurnstile::Turn> turn;
  if (ticket != UINT64_MAX) turn.emplace(core_->turnstile, ticket);  // first: never skipped
  Stage& stage = core_->stages[j];
  Slot& slot = slots_[i][j];
  if (slot.rng_from >= 0) ReceiveRngState(slot.rng_from, slot.rng_hop);
  bool any_grad = false;
  for (size_t n = 0; n < stage.inputs.size(); ++n) {
    const ValueSource& source = stage.inputs[n];
    const bool remote = IsRemote(source);
    c10::IValue v = remote ? ReceiveInput(i, j, n, false) : SourceValue(i, source);
    bool carries = needs_grad_ && (source.origin == ValueSource::Origin::StageOutput && !remote
                                       ? slots_[i][source.stage].output_requires_grad[source.index]
                                       : CarriesGrad(v));
    any_grad = any_grad || carries;
    slot.inputs.push_back(StageInput(v, stage.device, carries, *core_->copies));
  }
  if (slot.checkpointed) {
    if (stage.uses_rng) slot.rng = CaptureRngState(stage.device);
    at::NoGradGuard no_grad;
    slot.outputs = stage.Run(slot.inputs);
    // Which outputs would carry gradient, had the forward recorded it.
    bool params_grad = false;
    for (const auto& p : stage.module.parameters()) params_grad = params_grad || p.requires_grad();
    for (const auto& out : slot.outputs) {
      bool floating = out.isTensor() && out.toTensor().defined() &&
                      at::isFloatingType(out.toTensor().scalar_type());
      slot.output_requires_grad.push_back(floating && (any_grad || params_grad));
    }
  } else {
    at::AutoGradMode grad_mode(needs_grad_);
    slot.outputs = stage.Run(slot.inputs);
    for (const auto& out : slot.outputs) slot.output_requires_grad.push_back(CarriesGrad(out));
  }
  if (slot.rng_to >= 0) SendRngState(slot.rng_to, slot.rng_hop + 1);
  if (core_->detect_anomaly) {
    for (size_t k = 0; k < slot.outputs.size(); ++k) CheckFinite(slot.outputs[k], "output", k);
  }
  SendOutputs(i, j);
}

void PipelineRun::AddGrad(at::Tensor& into, const at::Tensor& grad, const c10::Device& device) {
  if (!grad.defined()) return;
  at::Tensor here = core_->copies->Copy(grad, device);  // back across a device boundary, if any
  into = into.defined() ? into + here : here;
}

c10::Device PipelineRun::InputDevice(size_t k) const {
  return micro_batches_.inputs[0][k].toTensor().device();  // only tensor inputs get gradients
}

void PipelineRun::RunBackwardTask(size_t i, size_t j, uint64_t ticket) {
  std::optional<RngTurnstile::Turn> turn;
  if (ticket != UINT64_MAX) turn.emplace(core_->turnstile, ticket);
  Stage& stage = core_->stages[j];
  Slot& slot = slots_[i][j];
  slot.output_grads.resize(slot.outputs.size());
  ReceiveOutputGrads(i, j);
  bool any = false;
  for (const auto& g : slot.output_grads) any = any || g.defined();
  if (any) {
    std::optional<BufferSnapshot> buffers;  // restored after this task's backward
    if (slot.checkpointed) {  // recompute the graph, replaying the forward's random draws
      buffers.emplace(stage.module);
      RngState current;
      if (stage.uses_rng) {
        current = CaptureRngState(stage.device);
        RestoreRngState(slot.rng);
      }
      RecomputeScope recompute;
      at::AutoGradMode grad_mode(true);
      int64_t start = core_->trace.enabled() ? TaskTrace::NowNs() : 0;
      slot.outputs = stage.Run(slot.inputs);
      if (start != 0) {
        core_->trace.Record({j, i, TaskRecord::Phase::Recompute, core_->worker_of_stage[j], start,
                             TaskTrace::NowNs()});
      }
      if (stage.uses_rng) RestoreRngState(current);
    }
    std::vector<at::Tensor> outs, grads;
    for (size_t k = 0; k < slot.outputs.size(); ++k) {
      if (slot.output_grads[k].defined() && CarriesGrad(slot.outputs[k])) {
        outs.push_back(slot.outputs[k].toTensor());
        grads.push_back(slot.output_grads[k]);
      }
    }
    if (!outs.empty()) {
      at::AutoGradMode grad_mode(true);
      torch::autograd::backward(outs, grads);
    }
  }
  for (size_t n = 0; n < stage.inputs.size(); ++n) {
    const c10::IValue& leaf = slot.inputs[n];
    if (!CarriesGrad(leaf)) continue;
    const ValueSource& source = stage.inputs[n];
    at::Tensor grad = leaf.toTensor().grad();
    if (grad.defined() && core_->detect_anomaly) CheckFinite(grad, "the gradient of input", n);
    if (IsRemote(source)) {  // always answered, so that the producer's rank knows it is done
      SendValue(*core_->peers, grad, false, core_->ranks.rank_of(source.stage),
                core_->ranks.Message(true, i, slots_.size(), j, n),
                "the gradient of " + OutputName(source.stage, source.index, i));
    } else if (!grad.defined()) {
      continue;
    } else if (source.origin == ValueSource::Origin::StageOutput) {
      AddGrad(slots_[i][source.stage].output_grads[source.index], grad, core_->stages[source.stage].device);
    } else {
      AddGrad(input_grads_[i][source.index], grad, InputDevice(source.index));
    }
  }
  slot = Slot();  // this (micro-batch, stage) is finished: free its activations
}

std::vector<at::Tensor> PipelineRun::Backward(const std::vector<at::Tensor>& output_grads) {
  const size_t m = slots_.size();
  const size_t num_inputs = micro_batches_.batched.size();
  input_grads_.assign(m, std::vector<at::Tensor>(num_inputs));
  for (auto& row : slots_) {
    for (auto& slot : row) slot.output_grads.assign(slot.outputs.size(), at::Tensor());
  }
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
  Schedule(BackwardClockCycles(m, core_->stages.size()), false);
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

}  // namespace gpipe
