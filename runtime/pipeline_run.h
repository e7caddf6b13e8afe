#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/ivalue.h>

#include "runtime/deferred_weight_grads.h"
#include "runtime/executor.h"
#include "runtime/keyed_random.h"
#include "runtime/microbatch.h"
#include "runtime/pipeline_core.h"
#include "runtime/recompute.h"
#include "runtime/schedule_order.h"
#include "runtime/value_transfer.h"

namespace gpipe {

// The loss of micro-batch i from its model outputs (leaves whose gradients
// become the stages' output gradients), as its share of the mini-batch's.
using RunMicroBatchLoss =
    std::function<at::Tensor(size_t i, const std::vector<at::Tensor>& outputs)>;

// The state of one forward call and its backward: per (micro-batch, stage)
// the stage's inputs, outputs and the gradients arriving for its outputs.
//
// Every stage input that carries gradient is cut into a fresh leaf, so each
// (micro-batch, stage) owns a small autograd graph. The executor (Execute)
// runs a schedule's action list: F runs a stage's forward, B backpropagates
// its own graph with torch::autograd::backward and hands its input leaves'
// gradients to the producing stages, I and W are B's halves (I runs the one
// backward pass and hands the input gradients on, W adds the weights' in). That explicit order is what
// torchgpipe's Fork/Join phony edges enforce inside one autograd graph; here
// no extra edges are needed, and a checkpointed task recomputes its graph
// first.
//
// Two ways to train. forward() then loss.backward(): Forward runs GPipe's
// forwards, the caller's loss runs on the gathered outputs, and Backward
// GPipe's backwards. train_step with a per-micro-batch loss: TrainStep runs
// the whole schedule (any of them), each micro-batch's loss right after the
// forward that completes its outputs, so 1F1B can start backwards early.
class PipelineRun {
 public:
  // `draws`: the seed and step that key this run's random draws (keyed_random.h);
  // its micro_batch is ignored (each task sets its own).
  PipelineRun(std::shared_ptr<PipelineCore> core, MicroBatches micro_batches, bool needs_grad,
              DrawKey draws);

  void Forward();

  // Output k of the model, one tensor per micro-batch (autograd-connected to
  // the stage graphs, which the caller must detach before gathering).
  std::vector<at::Tensor> OutputParts(size_t k) const;
  const MicroBatches& micro_batches() const { return micro_batches_; }

  // Gradients for each model output (undefined = no gradient). Returns the
  // gradient of each model input, gathered over micro-batches (undefined when
  // the input did not require grad). Releases the saved state.
  std::vector<at::Tensor> Backward(const std::vector<at::Tensor>& output_grads);

  // Runs every action of `schedule` (forwards, the loss of each micro-batch,
  // backwards) and returns the sum of the micro-batch losses computed here
  // (in several processes, on the rank of the last stage; 0 elsewhere).
  double TrainStep(const Schedule& schedule, const RunMicroBatchLoss& loss);

 private:
  // Threading contract. Slot (i, j) is written only by the tasks of stage j
  // for micro-batch i, which run one after another on stage j's thread: F
  // fills inputs and outputs, B or I and W read them and free the slot.
  // Other threads touch it at two points, each ordered by the executor's
  // waits (a task starts only after the tasks it depends on are done):
  // consumers' F read its outputs after F(j, i) is marked done, and
  // consumers' B or I (and the loss) add into its output_grads before B or
  // I (j, i) may start, one at a time, since each waits for the next
  // stage's to be done. Stage j's SEND/RECV actions are its tasks too.
  struct Slot {
    std::vector<c10::IValue> inputs;   // the stage's inputs (leaves where they carry gradient)
    std::vector<c10::IValue> outputs;
    std::vector<bool> output_requires_grad;
    std::vector<at::Tensor> output_grads;
    bool checkpointed = false;
    std::vector<c10::IValue> saved;  // selective: what the forward kept for the recompute
    // I ran, W not yet: each weight and the gradient I computed for it.
    std::vector<std::pair<at::Tensor, at::Tensor>> pending_weight_grads;
    // Several processes: RECV_F's values for the inputs another rank makes
    // (per input, None for local ones), taken by F; and B's or I's gradients
    // of those inputs (input, gradient, maybe undefined), sent by SEND_B.
    std::vector<c10::IValue> received_inputs;
    std::vector<std::pair<size_t, at::Tensor>> remote_input_grads;
    // B left its weight-gradient work to SEND_B, to run once its input
    // gradients are on their way (the previous stage waits for those).
    bool weight_gradients_after_send = false;
    // Receives posted ahead for RECV_F (per input) and RECV_B (per remote
    // use of an output), taken by that action; nullopt: not posted.
    std::vector<std::optional<PostedValue>> posted_inputs;
    std::vector<std::optional<PostedValue>> posted_output_grads;
    bool outputs_sent = false;  // SEND_F ran: which outputs carry gradient is known
  };

  // The executor (executor.h) runs `plan`'s actions with RunAction as the
  // task body; a failure reported is the first in the plan's order.
  void Execute(const ExecutionPlan& plan);
  // What the caller's loss threw, passed through unchanged (it is not a stage's failure).
  struct LossFailure {
    std::exception_ptr cause;
  };
  void RunAction(const Action& action);
  // The key of micro-batch i's draws (every stage's forward and recompute).
  DrawKey DrawKeyOf(size_t i) const { return {draws_.seed, draws_.step, i}; }

  // The task bodies (pipeline_tasks.cpp).
  void RunForwardTask(size_t i, size_t j);
  void RunLoss(size_t i);
  void RunBackwardTask(size_t i, size_t j, ActionKind kind);
  void RecomputeIfCheckpointed(size_t i, size_t j, std::optional<BufferSnapshot>& buffers);
  void HandInputGrads(size_t i, size_t j, const std::vector<at::Tensor>& grads);
  // A B or W task finished micro-batch i's weight gradients on stage j:
  // computes the deferred linear weight gradients after the stage's last
  // one of this run, or once they hold enough (deferred_weight_grads.h).
  void FinishWeightGradients(size_t j);
  c10::IValue SourceValue(size_t i, const ValueSource& source) const;
  // Adds `grad` into `into`, a gradient kept on `device` (its stage's, or its
  // model input's): a gradient coming from another device is copied there.
  void AddGrad(at::Tensor& into, const at::Tensor& grad, const c10::Device& device);
  c10::Device InputDevice(size_t k) const;  // where the caller's model input k lives

  // Several processes: values and gradients crossing to other ranks
  // (pipeline_exchange.cpp). The SEND/RECV actions' bodies, in the order a
  // stage's thread runs them: RECV_F, F, SEND_F; RECV_B, B or I, SEND_B.
  bool IsRemote(const ValueSource& source) const;
  void RunCommunication(const Action& action);
  void ReceiveInputs(size_t i, size_t j);       // RECV_F
  void SendOutputs(size_t i, size_t j);         // SEND_F
  void ReceiveOutputGrads(size_t i, size_t j);  // RECV_B
  void SendInputGrads(size_t i, size_t j);      // SEND_B
  // Receives posted ahead: per stage and direction, the micro-batches of
  // the running plan's RECV actions in the stage's order, the next to run
  // and how many were posted. At most one is posted and not yet taken, so a stage
  // holds one extra buffer per direction; a RECV_B is posted only after its
  // micro-batch's SEND_F (before it, whether the gradient comes is unknown).
  // Touched by stage j's tasks only, and by Execute before and after them.
  struct ReceiveQueue {
    std::vector<size_t> micro_batches;
    size_t next = 0;    // the RECV action to run next
    size_t posted = 0;  // how many are posted: next, or next + 1
  };
  void PlanReceivesAhead(const ExecutionPlan& plan);
  void PostNextReceive(size_t j, ActionKind kind);
  void ReceiveModelOutputs();  // all micro-batches' (forward(), then the caller's loss)
  void SendModelOutputGrads(const std::vector<at::Tensor>& output_grads);
  c10::IValue ReceiveModelOutput(size_t i, size_t k);  // one (the loss inside the schedule)
  void SendModelOutputGrad(size_t i, size_t k, const at::Tensor& grad);

  std::shared_ptr<PipelineCore> core_;
  MicroBatches micro_batches_;
  bool needs_grad_;
  std::vector<std::vector<Slot>> slots_;          // [micro-batch][stage]
  std::vector<std::vector<at::Tensor>> input_grads_;  // [micro-batch][model input]
  std::vector<std::vector<c10::IValue>> remote_outputs_;  // [micro-batch][model output] from other ranks
  DrawKey draws_;
  const RunMicroBatchLoss* loss_ = nullptr;  // set while TrainStep runs
  std::vector<double> losses_;               // [micro-batch], written by RunLoss
  std::optional<size_t> loss_stage_;         // the last stage producing a model output
  // [stage]: its linear layers' deferred weight gradients (null in a run
  // without gradients), and how many
  // micro-batches' B or W tasks it has finished; each touched by its
  // stage's tasks only (DeferredWeightGrads::Add also by autograd's threads).
  std::vector<c10::intrusive_ptr<DeferredWeightGrads>> deferred_weight_grads_;
  std::vector<size_t> weight_gradients_done_;
  std::vector<ReceiveQueue> input_receives_, grad_receives_;  // [stage]: RECV_F's, RECV_B's
};

}  // namespace gpipe
