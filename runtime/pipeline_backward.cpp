#include "runtime/pipeline_backward.h"

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

}  // namespace gpipe
