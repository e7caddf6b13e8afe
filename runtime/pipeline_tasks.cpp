// The task bodies the executor runs: a stage's forward (and, in train_step,
// a micro-batch's loss), its backward, and the backward's halves.

#include <optional>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "runtime/pipeline_run.h"
#include "runtime/recompute.h"
#include "runtime/value_transfer.h"

namespace gpipe {
namespace {

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
  TORCH_CHECK(
      at::isfinite(t).all().item<bool>(), "non-finite values (NaN or Inf) in ", what, " ", index,
      " of this stage (--detect-anomaly: this is the first stage and micro-batch to produce one)");
}

}  // namespace

void PipelineRun::RunForwardTask(size_t i, size_t j) {
  Stage& stage = core_->stages[j];
  Slot& slot = slots_[i][j];
  bool any_grad = false;
  for (size_t n = 0; n < stage.inputs.size(); ++n) {
    const ValueSource& source = stage.inputs[n];
    const bool remote = IsRemote(source);
    c10::IValue v = remote ? std::move(slot.received_inputs.at(n)) : SourceValue(i, source);
    bool carries = needs_grad_ && (source.origin == ValueSource::Origin::StageOutput && !remote
                                       ? slots_[i][source.stage].output_requires_grad[source.index]
                                       : CarriesGrad(v));
    any_grad = any_grad || carries;
    slot.inputs.push_back(StageInput(v, stage.device, carries, *core_->copies));
  }
  // Micro-batch i's draws, the same wherever and whenever this task runs (and when it recomputes).
  DrawScope draws(DrawKeyOf(i), stage.device);
  if (slot.checkpointed) {
    at::NoGradGuard no_grad;
    if (RunsRecomputePlan(core_->checkpoint)) {
      Stage::SavingRun run = stage.RunSaving(slot.inputs);
      slot.outputs = std::move(run.outputs);
      slot.saved = std::move(run.saved);
    } else {
      slot.outputs = stage.Run(slot.inputs);
    }
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
    // Linear layers leave their weight gradients to this stage's deferral.
    DeferWeightGradsScope defer(deferred_weight_grads_[j], i);
    slot.outputs = stage.Run(slot.inputs);
    for (const auto& out : slot.outputs) slot.output_requires_grad.push_back(CarriesGrad(out));
  }
  slot.received_inputs.clear();
  slot.output_grads.assign(slot.outputs.size(), at::Tensor());
  if (core_->detect_anomaly) {
    for (size_t k = 0; k < slot.outputs.size(); ++k) CheckFinite(slot.outputs[k], "output", k);
  }
}

// Micro-batch i's loss, on leaves cut from its model outputs: their gradients
// go to the producing stages' output gradients, so each stage's backward
// still runs on its own graph, on its own thread.
void PipelineRun::RunLoss(size_t i) {
  const auto& outputs = core_->manifest.outputs;
  std::vector<at::Tensor> leaves;
  std::vector<bool> remote(outputs.size(), false);  // from another rank: its gradient is sent back
  for (size_t k = 0; k < outputs.size(); ++k) {
    const ValueSource& source = outputs[k];
    remote[k] = IsRemote(source);
    c10::IValue v = remote[k] ? ReceiveModelOutput(i, k) : SourceValue(i, source);
    TORCH_CHECK(v.isTensor() || v.isNone(), "model output is a ", v.tagKind(),
                ", not a tensor; a pipelined model must return tensors with a batch dimension");
    if (v.isNone() || !v.toTensor().defined()) {
      leaves.emplace_back();
      continue;
    }
    at::Tensor leaf = v.toTensor().detach();
    const bool carries_grad = remote[k]
                                  ? CarriesGrad(v)
                                  : source.origin == ValueSource::Origin::StageOutput &&
                                        slots_[i][source.stage].output_requires_grad[source.index];
    if (carries_grad) leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  at::AutoGradMode grad_mode(true);
  at::Tensor value = (*loss_)(i, leaves);
  TORCH_CHECK(value.numel() == 1, "the loss must be a single value, but it has shape ",
              value.sizes());
  losses_[i] = value.item<double>();
  if (value.requires_grad()) value.backward();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const ValueSource& source = outputs[k];
    if (!leaves[k].defined() || !leaves[k].requires_grad()) continue;
    if (remote[k]) {
      SendModelOutputGrad(i, k, leaves[k].grad());  // always answered, maybe None
    } else if (leaves[k].grad().defined()) {
      AddGrad(slots_[i][source.stage].output_grads[source.index], leaves[k].grad(),
              core_->stages[source.stage].device);
    }
  }
}

void PipelineRun::AddGrad(at::Tensor& into, const at::Tensor& grad, const c10::Device& device) {
  if (!grad.defined()) return;
  at::Tensor here = core_->copies->Copy(grad, device);  // back across a device boundary, if any
  into = into.defined() ? into + here : here;
}

c10::Device PipelineRun::InputDevice(size_t k) const {
  return micro_batches_.inputs[0][k].toTensor().device();  // only tensor inputs get gradients
}

// Recomputes a checkpointed slot's graph with the forward's random draws
// (the same key): the whole stage, or (selective) all but the values its forward saved. `buffers` restores
// the stage's buffers once the caller's backward is done.
void PipelineRun::RecomputeIfCheckpointed(size_t i, size_t j,
                                          std::optional<BufferSnapshot>& buffers) {
  Slot& slot = slots_[i][j];
  if (!slot.checkpointed) return;
  Stage& stage = core_->stages[j];
  buffers.emplace(stage.module);
  DrawScope draws(DrawKeyOf(i), stage.device);
  RecomputeScope recompute;
  at::AutoGradMode grad_mode(true);
  DeferWeightGradsScope defer(deferred_weight_grads_[j], i);
  int64_t start = core_->trace.enabled() ? TaskTrace::NowNs() : 0;
  if (RunsRecomputePlan(core_->checkpoint)) {
    slot.outputs = stage.Recompute(slot.inputs, slot.saved);
    slot.saved.clear();  // the recompute's graph holds what backward needs of them
  } else {
    slot.outputs = stage.Run(slot.inputs);
  }
  if (start != 0) {
    core_->trace.Record({j, i, TaskRecord::Phase::Recompute, *core_->worker_of_stage[j], start,
                         TaskTrace::NowNs()});
  }
}

// B, or its halves: I (the inputs' gradients, handed on at once, and the
// weights', kept) and W (the kept weight gradients added into .grad, later).
void PipelineRun::RunBackwardTask(size_t i, size_t j, ActionKind kind) {
  Stage& stage = core_->stages[j];
  Slot& slot = slots_[i][j];
  if (kind == ActionKind::kBackwardWeight) {
    // The weights' gradients I computed, added in as AccumulateGrad would.
    for (auto& [weight, grad] : slot.pending_weight_grads) {
      if (!grad.defined()) continue;
      at::Tensor& into = weight.mutable_grad();
      into = into.defined() ? into + grad : grad;
    }
    slot = Slot();  // this (micro-batch, stage) is finished: free its activations
    FinishWeightGradients(j);
    return;
  }
  slot.output_grads.resize(slot.outputs.size());
  bool any = false;
  for (const auto& g : slot.output_grads) any = any || g.defined();
  std::vector<at::Tensor> outs, grads;
  std::optional<BufferSnapshot> buffers;  // restored after this task's backward
  if (any) {
    RecomputeIfCheckpointed(i, j, buffers);
    for (size_t k = 0; k < slot.outputs.size(); ++k) {
      if (slot.output_grads[k].defined() && CarriesGrad(slot.outputs[k])) {
        outs.push_back(slot.outputs[k].toTensor());
        grads.push_back(slot.output_grads[k]);
      }
    }
  }
  std::vector<at::Tensor> input_grads(stage.inputs.size());
  if (!outs.empty()) {
    at::AutoGradMode grad_mode(true);
    if (kind == ActionKind::kBackward) {
      torch::autograd::backward(outs, grads);
      for (size_t n = 0; n < stage.inputs.size(); ++n) {
        if (CarriesGrad(slot.inputs[n])) input_grads[n] = slot.inputs[n].toTensor().grad();
      }
    } else {
      // One backward pass for the inputs and the weights together (the graph
      // is freed here); W only adds the weights' part in. So I + W cost one
      // B, and the previous stage gets its gradient as early as from I.
      std::vector<size_t> which;
      std::vector<at::Tensor> leaves;
      for (size_t n = 0; n < stage.inputs.size(); ++n) {
        if (!CarriesGrad(slot.inputs[n])) continue;
        which.push_back(n);
        leaves.push_back(slot.inputs[n].toTensor());
      }
      const size_t num_inputs = leaves.size();
      std::vector<at::Tensor> weights;
      for (const auto& p : stage.module.parameters()) {
        if (p.requires_grad()) weights.push_back(p);
      }
      leaves.insert(leaves.end(), weights.begin(), weights.end());
      if (!leaves.empty()) {
        auto got = torch::autograd::grad(outs, leaves, grads, /*retain_graph=*/false, false,
                                         /*allow_unused=*/true);
        for (size_t k = 0; k < which.size(); ++k) input_grads[which[k]] = got[k];
        for (size_t k = 0; k < weights.size(); ++k)
          slot.pending_weight_grads.emplace_back(weights[k], got[num_inputs + k]);
      }
    }
  }
  HandInputGrads(i, j, input_grads);
  // Finished, but for W's weight gradients and SEND_B's: free its activations.
  auto pending = std::move(slot.pending_weight_grads);
  auto to_send = std::move(slot.remote_input_grads);
  slot = Slot();
  slot.pending_weight_grads = std::move(pending);
  slot.remote_input_grads = std::move(to_send);
  deferred_weight_grads_[j]->MarkDone(i);
  // After the input gradients are handed on, so the previous stage is not
  // kept waiting: here, or, when they go to another rank, after SEND_B.
  if (kind == ActionKind::kBackward) {
    if (slot.remote_input_grads.empty()) {
      FinishWeightGradients(j);
    } else {
      slot.weight_gradients_after_send = true;
    }
  }
}

void PipelineRun::FinishWeightGradients(size_t j) {
  const bool last = ++weight_gradients_done_[j] == slots_.size();
  deferred_weight_grads_[j]->Flush(/*everything=*/last);
}

void PipelineRun::HandInputGrads(size_t i, size_t j, const std::vector<at::Tensor>& grads) {
  const Stage& stage = core_->stages[j];
  Slot& slot = slots_[i][j];
  for (size_t n = 0; n < stage.inputs.size(); ++n) {
    if (!CarriesGrad(slot.inputs[n])) continue;
    const ValueSource& source = stage.inputs[n];
    const at::Tensor& grad = grads[n];
    if (grad.defined() && core_->detect_anomaly) CheckFinite(grad, "the gradient of input", n);
    if (IsRemote(source)) {  // always answered (SEND_B), so the producer's rank knows it is done
      slot.remote_input_grads.emplace_back(n, grad);
    } else if (!grad.defined()) {
      continue;
    } else if (source.origin == ValueSource::Origin::StageOutput) {
      AddGrad(slots_[i][source.stage].output_grads[source.index], grad,
              core_->stages[source.stage].device);
    } else {
      AddGrad(input_grads_[i][source.index], grad, InputDevice(source.index));
    }
  }
}

}  // namespace gpipe
