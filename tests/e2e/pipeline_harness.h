#pragma once

// Runs the original TorchScript model and a compiled pipeline side by side
// on the same inputs and collects outputs and parameter gradients.

#include <map>
#include <string>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

#include <torch/csrc/jit/api/function_impl.h>

#include "compiler/compile.h"
#include "compiler/model_loader.h"
#include "runtime/keyed_random.h"
#include "runtime/pipeline.h"

namespace gpipe::testing {

struct RunResult {
  at::Tensor output;
  std::map<std::string, at::Tensor> grads;  // original parameter names
  at::Tensor input_grad;
};

// Forward + sum().backward() on the unpipelined model. When `train`, the
// model runs as one graph (the compiler's lowering, random ops keyed) with
// the draws of key (seed, step 0, micro-batch 0): what a pipeline of one
// micro-batch draws in its first run after torch::manual_seed(seed), however
// it is split (runtime/keyed_random.h).
inline RunResult RunOriginal(const std::string& model_path, const at::Tensor& input, bool train,
                             uint64_t seed) {
  auto m = torch::jit::load(model_path);
  m.train(train);
  torch::manual_seed(seed);
  RunResult r;
  if (train) {
    LoweredModel lowered = LowerModel(m);
    std::vector<c10::IValue> stack{input};
    for (const auto& a : lowered.attributes) stack.push_back(a.value);
    EXPECT_EQ(stack.size(), lowered.graph->inputs().size());
    torch::jit::GraphFunction whole("keyed_original", lowered.graph, nullptr);
    DrawScope draws({seed, 0, 0}, input.device());
    c10::IValue out = whole(stack);
    r.output = out.isTuple() ? out.toTupleRef().elements().at(0).toTensor() : out.toTensor();
  } else {
    r.output = m.forward({input}).toTensor();
  }
  r.output.sum().backward();
  for (const auto& p : m.named_parameters()) r.grads[p.name] = p.value.grad().clone();
  if (input.requires_grad()) r.input_grad = input.grad().clone();
  return r;
}

inline RunResult RunPipeline(Pipeline& pipe, const at::Tensor& input, bool train, uint64_t seed) {
  pipe.train(train);
  pipe.set_draw_step(0);  // the key RunOriginal draws with
  for (auto& p : pipe.parameters()) p.mutable_grad() = at::Tensor();
  torch::manual_seed(seed);
  RunResult r;
  r.output = pipe.forward(input);
  r.output.sum().backward();
  for (const auto& [name, p] : pipe.named_parameters()) r.grads[name] = p.grad().clone();
  if (input.requires_grad()) r.input_grad = input.grad().clone();
  return r;
}

inline CompileOptions Options(int64_t stages, int64_t chunks,
                              CheckpointMode checkpoint = CheckpointMode::ExceptLast) {
  CompileOptions options;
  options.balance.num_stages = stages;
  options.chunks = chunks;
  options.checkpoint = checkpoint;
  return options;
}

// |got - want| / max(1, max |want|): float32 rounding grows with magnitude, so
// differences are compared relative to the tensor's scale (DESIGN.md's
// correctness contract); 0 means bitwise equal.
inline double ScaledDiff(const at::Tensor& got, const at::Tensor& want) {
  double scale = std::max(1.0, want.abs().max().item<double>());
  return (got.cpu() - want.cpu()).abs().max().item<double>() / scale;  // results may live on a GPU
}

// Largest scaled difference over outputs and every gradient; fails the test if
// a parameter is missing on either side.
inline double MaxDiff(const RunResult& want, const RunResult& got) {
  double worst = ScaledDiff(got.output, want.output);
  EXPECT_EQ(want.grads.size(), got.grads.size());
  for (const auto& [name, g] : want.grads) {
    auto it = got.grads.find(name);
    EXPECT_NE(it, got.grads.end()) << "no gradient for " << name;
    if (it == got.grads.end()) continue;
    EXPECT_TRUE(g.defined() && it->second.defined()) << name;
    if (!g.defined() || !it->second.defined()) continue;
    worst = std::max(worst, ScaledDiff(it->second, g));
  }
  return worst;
}

// Training step in never, except_last and always: recomputation (with its
// replayed random draws) must give bitwise the same outputs and gradients.
inline void ExpectCheckpointModesBitwiseEqual(const std::string& artifact, const at::Tensor& x,
                                              uint64_t seed) {
  std::vector<RunResult> results;
  for (auto mode : {CheckpointMode::Never, CheckpointMode::ExceptLast, CheckpointMode::Always}) {
    PipelineOptions options;
    options.checkpoint = mode;
    Pipeline pipe = Pipeline::load(artifact, options);
    results.push_back(RunPipeline(pipe, x, /*train=*/true, seed));
  }
  EXPECT_EQ(MaxDiff(results[0], results[1]), 0.0) << "except_last differs from never";
  EXPECT_EQ(MaxDiff(results[0], results[2]), 0.0) << "always differs from never";
}

}  // namespace gpipe::testing
