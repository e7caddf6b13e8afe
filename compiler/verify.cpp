#include "compiler/verify.h"

#include <algorithm>
#include <map>
#include <optional>

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

namespace {

struct Run {
  std::vector<at::Tensor> outputs;
  std::map<std::string, at::Tensor> grads;
};

Run RunOriginal(torch::jit::Module module, const std::vector<c10::IValue>& inputs) {
  module.eval();
  Run run;
  run.outputs = Flatten(module.forward(inputs));
  SumAll(run.outputs).backward();
  for (const auto& p : module.named_parameters(/*recurse=*/true)) run.grads[p.name] = p.value.grad();
  return run;
}

// The original in float64, or nothing if the model does not convert (e.g. it
// creates float32 tensors of its own in forward).
std::optional<Run> RunFloat64(const std::string& model_path, const std::vector<c10::IValue>& inputs) {
  try {
    torch::jit::Module module = LoadModel(model_path);
    module.to(at::kDouble);
    std::vector<c10::IValue> doubles;
    for (const auto& v : inputs) {
      bool floating = v.isTensor() && at::isFloatingType(v.toTensor().scalar_type());
      doubles.push_back(floating ? c10::IValue(v.toTensor().to(at::kDouble)) : v);
    }
    return RunOriginal(module, doubles);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

VerifyResult VerifyArtifact(const std::string& model_path, const std::string& artifact_path,
                            const std::vector<InputSpec>& specs, double tolerance) {
  SimpleExecutorScope simple_executor;
  torch::manual_seed(0);
  std::vector<c10::IValue> inputs = MakeSampleInputs(specs);
  Run want = RunOriginal(LoadModel(model_path), inputs);
  std::optional<Run> exact = RunFloat64(model_path, inputs);

  Pipeline pipeline = Pipeline::load(artifact_path);
  pipeline.eval();
  std::vector<at::Tensor> got = pipeline.forward(inputs);

  VerifyResult result;
  result.ok = true;
  result.has_float64 = exact.has_value();
  // One tensor: its difference from the original, and the verdict.
  auto judge = [&](const at::Tensor& g, const at::Tensor& w, const at::Tensor* reference) {
    double diff = ScaledDiff(g, w);
    bool ok = diff <= tolerance;
    if (reference != nullptr && reference->defined()) {
      at::Tensor r = reference->to(at::kDouble);
      double pipeline_error = ScaledDiff(g.to(at::kDouble), r);
      double original_error = ScaledDiff(w.to(at::kDouble), r);
      result.pipeline_error = std::max(result.pipeline_error, pipeline_error);
      result.original_error = std::max(result.original_error, original_error);
      ok = ok || pipeline_error <= original_error + tolerance;
    }
    result.ok = result.ok && ok;
    return diff;
  };
  TORCH_CHECK(got.size() == want.outputs.size(), "the pipeline returns ", got.size(),
              " outputs but the original model returns ", want.outputs.size());
  for (size_t k = 0; k < got.size(); ++k) {
    const at::Tensor* reference = exact ? &exact->outputs[k] : nullptr;
    result.output_diff = std::max(result.output_diff, judge(got[k], want.outputs[k], reference));
  }
  SumAll(got).backward();
  for (const auto& [name, param] : pipeline.named_parameters()) {
    auto it = want.grads.find(name);
    TORCH_CHECK(it != want.grads.end(), "pipeline parameter '", name,
                "' does not exist in the original model");
    at::Tensor want_grad = it->second.defined() ? it->second : torch::zeros_like(param);
    at::Tensor got_grad = param.grad().defined() ? param.grad() : torch::zeros_like(param);
    const at::Tensor* reference = exact ? &exact->grads.at(name) : nullptr;
    double diff = judge(got_grad, want_grad, reference);
    if (diff >= result.grad_diff) {
      result.grad_diff = diff;
      result.worst_grad = name;
    }
    ++result.parameters_compared;
  }
  return result;
}

}  // namespace gpipe
