// Several processes: what crosses between ranks during a run. Stage outputs
// and their gradients travel as tagged messages (RankPlan::Message), the
// model's outputs go to the rank holding them. Random draws need no
// message: they are keyed (keyed_random.h). In one process none of this
// runs: every stage is local.

#include "runtime/pipeline_run.h"
#include "runtime/value_transfer.h"

namespace gpipe {
namespace {

std::string OutputName(size_t stage, int64_t output, size_t micro_batch) {
  return "stage " + std::to_string(stage) + "'s output " + std::to_string(output) +
         " for micro-batch " + std::to_string(micro_batch);
}

}  // namespace

bool PipelineRun::IsRemote(const ValueSource& source) const {
  return source.origin == ValueSource::Origin::StageOutput && !core_->ranks.IsLocal(source.stage);
}

// Input n of stage j (forward), or the gradient for it (backward), from the rank that runs its
// producer.
c10::IValue PipelineRun::ReceiveInput(size_t i, size_t j, size_t n, bool backward) {
  const ValueSource& source = core_->stages[j].inputs[n];
  std::string what = OutputName(source.stage, source.index, i);
  return RecvValue(*core_->peers, core_->ranks.rank_of(source.stage),
                   core_->ranks.Message(backward, i, slots_.size(), j, n), what, &core_->messages);
}

void PipelineRun::SendOutputs(size_t i, size_t j) {
  const Slot& slot = slots_[i][j];
  for (const RemoteUse& use : core_->ranks.remote_uses(j)) {
    SendValue(*core_->peers, slot.outputs[use.output], slot.output_requires_grad[use.output],
              use.rank, core_->ranks.Message(false, i, slots_.size(), use.consumer, use.input),
              OutputName(j, use.output, i), &core_->messages);
  }
}

// A remote consumer that received an output carrying gradient always answers
// with its gradient (None when it has none), so both sides agree on messages.
void PipelineRun::ReceiveOutputGrads(size_t i, size_t j) {
  Slot& slot = slots_[i][j];
  for (const RemoteUse& use : core_->ranks.remote_uses(j)) {
    if (!slot.output_requires_grad[use.output]) continue;
    c10::IValue grad =
        RecvValue(*core_->peers, use.rank,
                  core_->ranks.Message(true, i, slots_.size(), use.consumer, use.input),
                  "the gradient of " + OutputName(j, use.output, i), &core_->messages);
    if (grad.isTensor()) {
      AddGrad(slot.output_grads[use.output], grad.toTensor(), core_->stages[j].device);
    }
  }
}

void PipelineRun::SendInputGrad(size_t i, size_t j, size_t n, const at::Tensor& grad) {
  const ValueSource& source = core_->stages[j].inputs[n];
  SendValue(*core_->peers, grad, false, core_->ranks.rank_of(source.stage),
            core_->ranks.Message(true, i, slots_.size(), j, n),
            "the gradient of " + OutputName(source.stage, source.index, i), &core_->messages);
}

void PipelineRun::ReceiveModelOutputs() {
  if (!core_->ranks.distributed() || !core_->ranks.HoldsOutputs()) return;
  const auto& outputs = core_->manifest.outputs;
  remote_outputs_.assign(slots_.size(), std::vector<c10::IValue>(outputs.size()));
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!IsRemote(outputs[k])) continue;
    for (size_t i = 0; i < slots_.size(); ++i) remote_outputs_[i][k] = ReceiveModelOutput(i, k);
  }
}

c10::IValue PipelineRun::ReceiveModelOutput(size_t i, size_t k) {
  const ValueSource& source = core_->manifest.outputs[k];
  return RecvValue(*core_->peers, core_->ranks.rank_of(source.stage),
                   core_->ranks.Message(false, i, slots_.size(), RankPlan::kModelOutputs,
                                        static_cast<int64_t>(k)),
                   OutputName(source.stage, source.index, i), &core_->messages);
}

void PipelineRun::SendModelOutputGrads(const std::vector<at::Tensor>& output_grads) {
  if (remote_outputs_.empty()) return;
  for (size_t k = 0; k < core_->manifest.outputs.size(); ++k) {
    if (!IsRemote(core_->manifest.outputs[k])) continue;
    std::vector<at::Tensor> parts(slots_.size());
    if (k < output_grads.size() && output_grads[k].defined()) {
      parts = output_grads[k].split_with_sizes(micro_batches_.sizes, 0);
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (CarriesGrad(remote_outputs_[i][k])) SendModelOutputGrad(i, k, parts[i]);
    }
  }
}

// Answers every received output that carried gradient (None when `grad` is
// undefined): its stage's backward waits for exactly these messages.
void PipelineRun::SendModelOutputGrad(size_t i, size_t k, const at::Tensor& grad) {
  const ValueSource& source = core_->manifest.outputs[k];
  SendValue(*core_->peers, grad, false, core_->ranks.rank_of(source.stage),
            core_->ranks.Message(true, i, slots_.size(), RankPlan::kModelOutputs,
                                 static_cast<int64_t>(k)),
            "the gradient of " + OutputName(source.stage, source.index, i), &core_->messages);
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

}  // namespace gpipe
