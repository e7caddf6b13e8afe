#pragma once

#include <memory>
#include <vector>

#include <ATen/core/ivalue.h>

#include "runtime/microbatch.h"
#include "runtime/pipeline_core.h"
#include "runtime/schedule.h"
#include "runtime/rng_turnstile.h"

namespace gpipe {

// The state of one forward call and its backward: per (micro-batch, stage)
// the stage's inputs, outputs and the gradients arriving for its outputs.
//
// Forward runs the GPipe clock schedule on the workers. With autograd on,
// every stage input that carries gradient is cut into a fresh leaf, so each
// (micro-batch, stage) owns a small autograd graph; Backward then runs the
// mirrored clock schedule, each task backpropagating its own graph with
// torch::autograd::backward and handing its input leaves' gradients to the
// producing stages. That explicit order is what torchgpipe's Fork/Join
// phony edges enforce inside one autograd graph; here no extra edges are
// needed, and a checkpointed task simply recomputes its graph first.
class PipelineRun {
 public:
  PipelineRun(std::shared_ptr<PipelineCore> core, MicroBatches micro_batches, bool needs_grad);

  void Forward();

  // Output k of the model, one tensor per micro-batch (autograd-connected to
  // the stage graphs, which the caller must detach before gathering).
  std::vector<at::Tensor> OutputParts(size_t k) const;
  const MicroBatches& micro_batches() const { return micro_batches_; }

  // Gradients for each model output (undefined = no gradient). Returns the
  // gradient of each model input, gathered over micro-batches (undefined when
  // the input did not require grad). Releases the saved state.
  std::vector<at::Tensor> Backward(const std::vector<at::Tensor>& output_grads);

 private:
  struct Slot {
    std::vector<c10::IValue> inputs;   // the stage's inputs (leaves where they carry gradient)
    std::vector<c10::IValue> outputs;
    std::vector<bool> output_requires_grad;
    std::vector<at::Tensor> output_grads;
    bool checkpointed = false;
    RngState rng;  // generator state before the forward, for an exact recompute
    int rng_from = -1;  // several processes: the rank handing this task the generator state
    int rng_to = -1;    // and the rank it hands it on to (-1: this rank, no message)
    size_t rng_hop = 0;
  };

  void RunForwardTask(size_t i, size_t j, uint64_t ticket);
  // Multi-process: values and gradients crossing to other ranks.
  bool IsRemote(const ValueSource& source) const;
  c10::IValue ReceiveInput(size_t i, size_t j, size_t n, bool backward);
  void SendOutputs(size_t i, size_t j);
  void ReceiveOutputGrads(size_t i, size_t j);
  void ReceiveModelOutputs();
  void SendModelOutputGrads(const std::vector<at::Tensor>& output_grads);
  void PlanRngRelay(const std::vector<std::vector<Task>>& clocks);
  void SendRngState(int peer, size_t hop);
  void ReceiveRngState(int peer, size_t hop);
  void RunBackwardTask(size_t i, size_t j, uint64_t ticket);
  void Schedule(const std::vector<std::vector<Task>>& clocks, bool forward);
  c10::IValue SourceValue(size_t i, const ValueSource& source) const;
  // Adds `grad` into `into`, a gradient kept on `device` (its stage's, or its
  // model input's): a gradient coming from another device is copied there.
  void AddGrad(at::Tensor& into, const at::Tensor& grad, const c10::Device& device);
  c10::Device InputDevice(size_t k) const;  // where the caller's model input k lives

  std::shared_ptr<PipelineCore> core_;
  MicroBatches micro_batches_;
  bool needs_grad_;
  std::vector<std::vector<Slot>> slots_;          // [micro-batch][stage]
  std::vector<std::vector<at::Tensor>> input_grads_;  // [micro-batch][model input]
  std::vector<std::vector<c10::IValue>> remote_outputs_;  // [micro-batch][model output] from other ranks
  int rng_home_from_ = -1;  // the rank returning the generator state after the forward (see PlanRngRelay)
  size_t rng_home_hop_ = 0;
};

}  // namespace gpipe
