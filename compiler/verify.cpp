#include "compiler/verify.h"

#include <algorithm>
#include <map>

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/torch.h>

#include "compiler/model_loader.h"
#include "runtime/pipeline.h"

namespace gpipe {
namespace {

double ScaledDiff(const at::Tensor& got, const at::Tensor& want) {
  TORCH_CHECK(got.sizes() == want.sizes(), "shape mismatch: pipeline gives ", got.sizes(),
              " but the original model gives ", want.sizes());
  if (want.numel() == 0) return 0;
  double scale = std::max(1.0, want.abs().max().item<double>());
  return (got.to(want.dtype()) - want).abs().max().item<double>() / scale;
}

std::vector<at::Tensor> Flatten(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  TORCH_CHECK(v.isTuple(), "the model returns a ", v.tagKind(),
              "; --verify compares tensors or tuples of tensors");
  std::vector<at::Tensor> out;
  for (const auto& e : v.toTupleRef().elements()) out.push_back(e.toTensor());
  return out;
}

at::Tensor SumAll(const std::vector<at::Tensor>& outputs) {
  at::Tensor total = torch::zeros({}, outputs.at(0).options());
  for (const auto& o : outputs) {
    if (at::isFloatingType(o.scalar_type())) total = total + o.sum();
  }
  return total;
}

}  // namespace

SimpleExecutorScope::SimpleExecutorScope() : previous_(torch::jit::getExecutorMode()) {
  torch::jit::getExecutorMode() = false;
}
SimpleExecutorScope::~SimpleExecutorScope() { torch::jit::getExecutorMode() = previous_; }

VerifyResult VerifyArtifact(const std::string& model_path, const std::string& artifact_path,
                            const std::vector<InputSpec>& specs, double tolerance) {
  SimpleExecutorScope simple_executor;
  torch::manual_seed(0);
  std::vector<c10::IValue> inputs = MakeSampleInputs(specs);

  torch::jit::Module original = LoadModel(model_path);
  original.eval();
  std::vector<at::Tensor> want = Flatten(original.forward(inputs));
  SumAll(want).backward();
  std::map<std::string, at::Tensor> want_grads;
  for (const auto& p : original.named_parameters(/*recurse=*/true)) want_grads[p.name] = p.value.grad();

  Pipeline pipeline = Pipeline::load(artifact_path);
  pipeline.eval();
  std::vector<at::Tensor> got = pipeline.forward(inputs);

  VerifyResult result;
  TORCH_CHECK(got.size() == want.size(), "the pipeline returns ", got.size(),
              " outputs but the original model returns ", want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    result.output_diff = std::max(result.output_diff, ScaledDiff(got[k], want[k]));
  }
  SumAll(got).backward();
  for (const auto& [name, param] : pipeline.named_parameters()) {
    auto it = want_grads.find(name);
    TORCH_CHECK(it != want_grads.end(), "pipeline parameter '", name,
                "' does not exist in the original model");
    at::Tensor want_grad = it->second.defined() ? it->second : torch::zeros_like(param);
    at::Tensor got_grad = param.grad().defined() ? param.grad() : torch::zeros_like(param);
    double diff = ScaledDiff(got_grad, want_grad);
    if (diff >= result.grad_diff) {
      result.grad_diff = diff;
      result.worst_grad = name;
    }
    ++result.parameters_compared;
  }
  result.ok = result.output_diff <= tolerance && result.grad_diff <= tolerance;
  return result;
}

}  // namespace gpipe
