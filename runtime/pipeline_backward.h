#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/autograd/function.h>

#include "runtime/pipeline_run.h"

namespace gpipe {

// The autograd node behind a pipelined forward's outputs. When the engine
// reaches it (e.g. from loss.backward()), it runs the pipelined backward
// schedule on the workers; parameter gradients accumulate into the stage
// modules' parameters there, and the gradients of the model inputs that
// require grad are returned to the engine.
class PipelineBackward : public torch::autograd::Node {
 public:
  PipelineBackward(std::shared_ptr<PipelineRun> run, std::vector<size_t> grad_outputs,
                   std::vector<size_t> grad_inputs, size_t num_outputs);
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override;
  std::string name() const override { return "gpipe::PipelineBackward"; }
  void release_variables() override { run_.reset(); }

 private:
  std::shared_ptr<PipelineRun> run_;
  std::vector<size_t> grad_outputs_;  // model output behind each of this node's inputs
  std::vector<size_t> grad_inputs_;   // model input behind each of this node's next edges
  size_t num_outputs_;
};

// Makes the gathered outputs autograd-connected: their gradients run the
// pipelined backward schedule, which hands back the inputs' gradients.
void AttachBackward(const std::shared_ptr<PipelineRun>& run, const std::vector<c10::IValue>& inputs,
                    std::vector<at::Tensor>& outputs);

}  // namespace gpipe
