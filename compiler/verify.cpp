#include "compiler/verify.h"

#include <algorithm>
#include <map>
#include <optional>
#include <thread>

#include <torch/torch.h>

#include "compiler/model_loader.h"
#include "runtime/executor_mode.h"
#include "runtime/microbatch.h"
#include "runtime/pipeline.h"

namespace gpipe {
namespace {

// How much further from the float64 result than the float32 original a
// pipeline may be and still count as rounding differently. LibTorch's float32
// kernels round differently for other batch sizes and thread counts: plain
// LibTorch 1.13, no pipeline, gives ResNet-50's layer3.2.bn3.bias gradient
// (batch 2 at 64x64) a scaled error of 3e-7 in one micro-batch on one thread
// but 3.8e-3 in two micro-batches on one thread, and 3.8e-3 vs 4e-7 the other
// way round on two threads. So the pipeline is also compared with the original
// run on the same micro-batches with the stages' thread count, and judged
// against the worse of the two originals' errors, with this slack: RegNet-X-
// 16GF's gradients were up to 1.37x as far from float64 as the original's.
// A wrong pipeline is off by orders of magnitude, not by a factor of two.
constexpr double kRoundingSlack = 2.0;

// Sets LibTorch's intra-op threads for its lifetime.
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int threads) : previous_(at::get_num_threads()) { at::set_num_threads(threads); }
  ~IntraOpThreads() { at::set_num_threads(previous_); }

 private:
  int previous_;
};

double ScaledDiff(const at::Tensor& got, const at::Tensor& want) {
  TORCH_CHECK(got.sizes() == want.sizes(), "shape mismatch: pipeline gives ", got.sizes(),
              " but the original model gives ", want.sizes());
  if (want.numel() == 0) return 0;
  double scale = std::max(1.0, want.abs().max().item<double>());
  return (got.to(want.dtype()) - want).abs().max().item<double>() / scale;
}

using Leaves = std::vector<std::pair<std::string, c10::IValue>>;

at::Tensor SumAll(const Leaves& outputs) {
  at::Tensor total = torch::zeros({}, at::kDouble);
  for (const auto& [path, v] : outputs) {
    if (v.isTensor() && at::isFloatingType(v.toTensor().scalar_type())) total = total + v.toTensor().sum();
  }
  return total;
}

}  // namespace

namespace {

// Results cut from their autograd graph, which would keep the model's
// parameters alive after the model itself is gone.
void Detach(Leaves& leaves) {
  for (auto& leaf : leaves) {
    if (leaf.second.isTensor()) leaf.second = leaf.second.toTensor().detach();
  }
}

struct Run {
  Leaves outputs;  // every leaf of the result, with its path ("logits", "out[1]")
  std::map<std::string, at::Tensor> grads;
};

Run RunOriginal(torch::jit::Module module, const std::vector<c10::IValue>& inputs) {
  module.eval();
  Run run;
  run.outputs = FlattenWithPaths(module.forward(inputs));
  at::Tensor total = SumAll(run.outputs);
  if (total.requires_grad()) total.backward();
  for (const auto& p : module.named_parameters(/*recurse=*/true)) run.grads[p.name] = p.value.grad();
  Detach(run.outputs);
  return run;
}

// The original run on the micro-batches the pipeline makes, one after the
// other, with the intra-op threads of a pipeline stage: the same kernels as
// the pipeline's, so the same rounding. Outputs are gathered along dim 0.
Run RunOriginalMicroBatched(torch::jit::Module module, const std::vector<c10::IValue>& inputs,
                            const std::vector<ForwardArgument>& signature, int64_t chunks, int threads) {
  IntraOpThreads scope(threads);
  module.eval();
  MicroBatches micro = Scatter(inputs, chunks, signature);
  std::vector<Leaves> parts;
  for (const auto& part : micro.inputs) {
    parts.push_back(FlattenWithPaths(module.forward(part)));
    at::Tensor total = SumAll(parts.back());
    if (total.requires_grad()) total.backward();
  }
  Run run;
  run.outputs = parts.at(0);
  for (size_t k = 0; k < run.outputs.size(); ++k) {
    if (!run.outputs[k].second.isTensor()) continue;
    std::vector<at::Tensor> pieces;
    for (const auto& p : parts) pieces.push_back(p.at(k).second.toTensor());
    run.outputs[k].second = Gather(pieces);
  }
  for (const auto& p : module.named_parameters(/*recurse=*/true)) run.grads[p.name] = p.value.grad();
  Detach(run.outputs);
  return run;
}

// The original in float64, or nothing if the model does not convert (e.g. it
// creates float32 tensors of its own in forward).
std::optional<Run> RunFloat64(const std::string& model_path, const std::vector<c10::IValue>& inputs) {
  try {
    torch::jit::Module module = LoadModel(model_path);
    module.to(at::kDouble);
    std::vector<c10::IValue> doubles;
    for (const auto& v : inputs) {  // the model's own float32 tensors stay float32
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
  SignatureKeyedExecutorScope signature_keyed;
  torch::manual_seed(0);
  // Each reference run loads its own copy of the model and frees it on
  // return, keeping only results and gradients: for ViT-H/14 (632M
  // parameters) the copies would not fit together in memory.
  torch::jit::Module original = LoadModel(model_path);
  std::vector<c10::IValue> inputs = MakeSampleInputs(specs, ForwardSignature(original));
  Run want = RunOriginal(std::move(original), inputs);  // the last handle: freed on return
  std::optional<Run> exact = RunFloat64(model_path, inputs);

  Pipeline pipeline = Pipeline::load(artifact_path);
  pipeline.eval();
  const int stage_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                            static_cast<int>(pipeline.num_stages()));
  std::optional<Run> same_kernels;
  if (pipeline.chunks() > 1) {
    same_kernels = RunOriginalMicroBatched(LoadModel(model_path), inputs, pipeline.signature(),
                                           pipeline.chunks(), stage_threads);
  }
  const Run& micro = same_kernels ? *same_kernels : want;
  Leaves got = FlattenWithPaths(pipeline(inputs));

  VerifyResult result;
  result.ok = true;
  result.has_float64 = exact.has_value();
  // One tensor: its difference from the original, and the verdict. `m` is
  // the original's on the same micro-batches (see RunOriginalMicroBatched).
  auto judge = [&](const at::Tensor& g, const at::Tensor& w, const at::Tensor& m, const at::Tensor* reference) {
    double diff = ScaledDiff(g, w);
    double same_kernels_diff = ScaledDiff(g, m);
    result.same_micro_batches_diff = std::max(result.same_micro_batches_diff, same_kernels_diff);
    bool ok = diff <= tolerance || same_kernels_diff <= tolerance;
    if (reference != nullptr && reference->defined()) {
      at::Tensor r = reference->to(at::kDouble);
      double pipeline_error = ScaledDiff(g.to(at::kDouble), r);
      double original_error =
          std::max(ScaledDiff(w.to(at::kDouble), r), ScaledDiff(m.to(at::kDouble), r));
      result.pipeline_error = std::max(result.pipeline_error, pipeline_error);
      result.original_error = std::max(result.original_error, original_error);
      ok = ok || pipeline_error <= kRoundingSlack * original_error + tolerance;
    }
    result.ok = result.ok && ok;
    return diff;
  };
  TORCH_CHECK(got.size() == want.outputs.size(), "the pipeline returns ", got.size(),
              " values but the original model returns ", want.outputs.size());
  for (size_t k = 0; k < got.size(); ++k) {
    const auto& [path, g] = got[k];
    const c10::IValue& w = want.outputs[k].second;
    TORCH_CHECK(path == want.outputs[k].first, "the pipeline returns ", path, " where the original returns ",
                want.outputs[k].first);
    if (g.isTensor() && w.isTensor()) {
      const c10::IValue* r = exact ? &exact->outputs[k].second : nullptr;
      at::Tensor reference = r && r->isTensor() ? r->toTensor() : at::Tensor();
      const c10::IValue& m = micro.outputs.at(k).second;
      double diff = judge(g.toTensor(), w.toTensor(), m.isTensor() ? m.toTensor() : w.toTensor(),
                          reference.defined() ? &reference : nullptr);
      if (diff >= result.output_diff) {
        result.output_diff = diff;
        result.worst_output = path;
      }
      continue;
    }
    // None, numbers and strings must be the same.
    bool same = g.tagKind() == w.tagKind() && (g.isNone() || g == w);
    TORCH_CHECK(same, "the pipeline returns ", g.tagKind(), " for ", path, " where the original returns ",
                w.tagKind());
  }
  if (pipeline.schedule() == "gpipe") {
    at::Tensor total = SumAll(got);
    if (total.requires_grad()) total.backward();
  } else {  // the artifact's schedule, its loss per micro-batch: each one's share of the sum
    pipeline.train_step(inputs, [](const MicroBatchRows&, const std::vector<at::Tensor>& outputs) {
      at::Tensor share = torch::zeros({}, at::kDouble);
      for (const auto& o : outputs) {
        if (o.defined() && at::isFloatingType(o.scalar_type())) share = share + o.sum();
      }
      return share;
    });
  }
  for (const auto& [name, param] : pipeline.named_parameters()) {
    auto it = want.grads.find(name);
    TORCH_CHECK(it != want.grads.end(), "pipeline parameter '", name,
                "' does not exist in the original model");
    at::Tensor want_grad = it->second.defined() ? it->second : torch::zeros_like(param);
    at::Tensor got_grad = param.grad().defined() ? param.grad() : torch::zeros_like(param);
    at::Tensor micro_grad = micro.grads.at(name);
    if (!micro_grad.defined()) micro_grad = torch::zeros_like(param);
    const at::Tensor* reference = exact ? &exact->grads.at(name) : nullptr;
    double diff = judge(got_grad, want_grad, micro_grad, reference);
    if (diff >= result.grad_diff) {
      result.grad_diff = diff;
      result.worst_grad = name;
    }
    ++result.parameters_compared;
  }
  return result;
}

}  // namespace gpipe
