// Several processes: what crosses between ranks during a run. Stage outputs
// and their gradients travel as tagged messages (RankPlan::Message), sent
// and received by the schedule's SEND/RECV actions (schedule_lowering.h);
// the model's outputs go to the rank holding them (received by the loss in
// its stage's F, or after forward()). Random draws need no
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

void PipelineRun::RunCommunication(const Action& action) {
  const size_t i = action.micro_batch;
  const size_t j = action.stage;
  switch (action.kind) {
    case ActionKind::kRecvForward:
      return ReceiveInputs(i, j);
    case ActionKind::kSendForward:
      return SendOutputs(i, j);
    case ActionKind::kRecvBackward:
      return ReceiveOutputGrads(i, j);
    case ActionKind::kSendBackward:
      return SendInputGrads(i, j);
    default:
      TORCH_INTERNAL_ASSERT(false, "not a communication action: ", ToString(action));
  }
}

// Posting a receive before the action that takes it lets its bytes (and
// Gloo's handshake, which waits for the receiver) arrive while this rank
// computes, instead of when RECV runs. The queues hold this plan's RECV
// actions per stage in the order the stage runs them.
void PipelineRun::PlanReceivesAhead(const ExecutionPlan& plan) {
  const size_t num_stages = core_->stages.size();
  input_receives_.assign(num_stages, ReceiveQueue());
  grad_receives_.assign(num_stages, ReceiveQueue());
  if (!core_->ranks.distributed()) return;
  for (const Action& action : plan.actions) {
    if (action.kind == ActionKind::kRecvForward) {
      input_receives_[action.stage].micro_batches.push_back(action.micro_batch);
    } else if (action.kind == ActionKind::kRecvBackward) {
      grad_receives_[action.stage].micro_batches.push_back(action.micro_batch);
    }
  }
  for (size_t j = 0; j < num_stages; ++j) {
    PostNextReceive(j, ActionKind::kRecvForward);
    PostNextReceive(j, ActionKind::kRecvBackward);
  }
}

// Posts the stage's next RECV of `kind` unless one is posted already (or,
// for gradients, its micro-batch's SEND_F has not run). Only messages whose
// size both ranks remember are posted (PostValue): from the second step on.
void PipelineRun::PostNextReceive(size_t j, ActionKind kind) {
  const bool forward = kind == ActionKind::kRecvForward;
  ReceiveQueue& queue = forward ? input_receives_[j] : grad_receives_[j];
  if (queue.posted > queue.next || queue.next == queue.micro_batches.size()) return;
  const size_t i = queue.micro_batches[queue.next];
  Slot& slot = slots_[i][j];
  if (!forward && !slot.outputs_sent) return;
  queue.posted = queue.next + 1;
  if (forward) {
    const std::vector<ValueSource>& inputs = core_->stages[j].inputs;
    slot.posted_inputs.assign(inputs.size(), std::nullopt);
    for (size_t n = 0; n < inputs.size(); ++n) {
      if (!IsRemote(inputs[n])) continue;
      slot.posted_inputs[n] =
          PostValue(*core_->peers, core_->ranks.rank_of(inputs[n].stage),
                    core_->ranks.Message(false, i, slots_.size(), j, n),
                    OutputName(inputs[n].stage, inputs[n].index, i), core_->messages);
    }
    return;
  }
  const std::vector<RemoteUse>& uses = core_->ranks.remote_uses(j);
  slot.posted_output_grads.assign(uses.size(), std::nullopt);
  for (size_t u = 0; u < uses.size(); ++u) {
    if (!slot.output_requires_grad[uses[u].output]) continue;
    slot.posted_output_grads[u] =
        PostValue(*core_->peers, uses[u].rank,
                  core_->ranks.Message(true, i, slots_.size(), uses[u].consumer, uses[u].input),
                  "the gradient of " + OutputName(j, uses[u].output, i), core_->messages);
  }
}

namespace {
// The value of a receive posted ahead, or received now when none was.
c10::IValue Take(std::vector<std::optional<PostedValue>>& posted, size_t k, PeerGroup& peers,
                 int peer, int message, const std::string& what, MessageMemory& memory) {
  if (k < posted.size() && posted[k]) {
    PostedValue value = *std::move(posted[k]);
    posted[k].reset();
    return TakePostedValue(peers, std::move(value), memory);
  }
  return RecvValue(peers, peer, message, what, &memory);
}
}  // namespace

// Stage j's inputs for micro-batch i that another rank makes, from the rank
// running each producer, kept for F.
void PipelineRun::ReceiveInputs(size_t i, size_t j) {
  const std::vector<ValueSource>& inputs = core_->stages[j].inputs;
  Slot& slot = slots_[i][j];
  ReceiveQueue& queue = input_receives_[j];
  TORCH_INTERNAL_ASSERT(queue.next < queue.micro_batches.size() &&
                        queue.micro_batches[queue.next] == i);
  ++queue.next;
  slot.received_inputs.assign(inputs.size(), c10::IValue());
  for (size_t n = 0; n < inputs.size(); ++n) {
    const ValueSource& source = inputs[n];
    if (!IsRemote(source)) continue;
    slot.received_inputs[n] =
        Take(slot.posted_inputs, n, *core_->peers, core_->ranks.rank_of(source.stage),
             core_->ranks.Message(false, i, slots_.size(), j, n),
             OutputName(source.stage, source.index, i), core_->messages);
  }
  PostNextReceive(j, ActionKind::kRecvForward);
}

void PipelineRun::SendOutputs(size_t i, size_t j) {
  Slot& slot = slots_[i][j];
  for (const RemoteUse& use : core_->ranks.remote_uses(j)) {
    SendValue(*core_->peers, slot.outputs[use.output], slot.output_requires_grad[use.output],
              use.rank, core_->ranks.Message(false, i, slots_.size(), use.consumer, use.input),
              OutputName(j, use.output, i), &core_->messages);
  }
  slot.outputs_sent = true;
  PostNextReceive(j, ActionKind::kRecvBackward);
}

// A remote consumer that received an output carrying gradient always answers
// with its gradient (None when it has none), so both sides agree on messages.
void PipelineRun::ReceiveOutputGrads(size_t i, size_t j) {
  Slot& slot = slots_[i][j];
  ReceiveQueue& queue = grad_receives_[j];
  TORCH_INTERNAL_ASSERT(queue.next < queue.micro_batches.size() &&
                        queue.micro_batches[queue.next] == i);
  ++queue.next;
  const std::vector<RemoteUse>& uses = core_->ranks.remote_uses(j);
  for (size_t u = 0; u < uses.size(); ++u) {
    const RemoteUse& use = uses[u];
    if (!slot.output_requires_grad[use.output]) continue;
    c10::IValue grad = Take(slot.posted_output_grads, u, *core_->peers, use.rank,
                            core_->ranks.Message(true, i, slots_.size(), use.consumer, use.input),
                            "the gradient of " + OutputName(j, use.output, i), core_->messages);
    if (grad.isTensor()) {
      AddGrad(slot.output_grads[use.output], grad.toTensor(), core_->stages[j].device);
    }
  }
  PostNextReceive(j, ActionKind::kRecvBackward);
}

// Every received input that carried gradient is answered (None when it got
// none), so that the producer's rank knows its backward may start.
void PipelineRun::SendInputGrads(size_t i, size_t j) {
  Slot& slot = slots_[i][j];
  for (const auto& [n, grad] : slot.remote_input_grads) {
    const ValueSource& source = core_->stages[j].inputs[n];
    SendValue(*core_->peers, grad, false, core_->ranks.rank_of(source.stage),
              core_->ranks.Message(true, i, slots_.size(), j, static_cast<int64_t>(n)),
              "the gradient of " + OutputName(source.stage, source.index, i), &core_->messages);
  }
  slot.remote_input_grads.clear();
  if (slot.weight_gradients_after_send) {
    slot.weight_gradients_after_send = false;
    FinishWeightGradients(j);
  }
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
