#include "runtime/pipeline_backward.h"

#include <torch/csrc/autograd/functions/utils.h>

#include "runtime/torch_compat.h"

namespace gpipe {

PipelineBackward::PipelineBackward(std::shared_ptr<PipelineRun> run,
                                   std::vector<size_t> grad_outputs,
                                   std::vector<size_t> grad_inputs, size_t num_outputs)
    : run_(std::move(run)),
      grad_outputs_(std::move(grad_outputs)),
      grad_inputs_(std::move(grad_inputs)),
      num_outputs_(num_outputs) {}

torch::autograd::variable_list PipelineBackward::apply(torch::autograd::variable_list&& grads) {
  TORCH_CHECK(run_, "backward ran twice through the same pipelined forward; the pipeline frees "
              "its activations after the first backward (retain_graph is not supported): run "
              "forward again");
  std::shared_ptr<PipelineRun> run = std::move(run_);
  std::vector<at::Tensor> output_grads(num_outputs_);
  for (size_t n = 0; n < grads.size(); ++n) output_grads[grad_outputs_[n]] = grads[n];
  std::vector<at::Tensor> input_grads = run->Backward(output_grads);
  torch::autograd::variable_list result;
  for (size_t k : grad_inputs_) result.push_back(input_grads[k]);
  return result;
}

void AttachBackward(const std::shared_ptr<PipelineRun>& run, const std::vector<c10::IValue>& inputs,
                    std::vector<at::Tensor>& outputs) {
  std::vector<size_t> grad_inputs;
  std::vector<at::Tensor> grad_input_tensors;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].isTensor() && inputs[k].toTensor().requires_grad()) {
      grad_inputs.push_back(k);
      grad_input_tensors.push_back(inputs[k].toTensor());
    }
  }
  std::vector<size_t> grad_outputs;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].defined() && (at::isFloatingType(outputs[k].scalar_type()) ||
                                 at::isComplexType(outputs[k].scalar_type()))) {
      grad_outputs.push_back(k);
    }
  }
  auto node = compat::MakeNode<PipelineBackward>(run, grad_outputs, grad_inputs, outputs.size());
  node->set_next_edges(torch::autograd::collect_next_edges(grad_input_tensors));
  for (size_t k : grad_outputs) torch::autograd::set_history(outputs[k], node);
}

}  // namespace gpipe
