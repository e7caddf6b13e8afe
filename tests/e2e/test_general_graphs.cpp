// Non-Sequential models: whole-graph partitioning, skip routes, tied weights,
// control flow near a cut, several inputs/outputs. Differences are scaled as
// in test_pipeline_equality.cpp (|got - want| / max(1, max|want|)).
//
// One micro-batch: bitwise equal (ResNet-50, U-Net, GPT measured 0), except
// branchy.pt, where LibTorch computes the unsplit graph differently from its
// parts: calling the three submodules one by one in Python, no gpipe
// involved, differs from model(x) by the same 3e-8 in 0.bias's gradient.
// Several micro-batches: convolution backward kernels round differently for
// other batch heights, and BatchNorm-bias gradients sum that over N*H*W:
// measured 1.6e-6 (ResNet-50, 4 chunks) and 1.3e-5 (U-Net, 4 chunks, in
// dec1.3.bias, with outputs within 3e-8), hence 1e-5 and 5e-5 there.

#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/artifact.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::MaxDiff;
using testing::Options;
using testing::RunOriginal;
using testing::RunPipeline;
using testing::TempDir;
using testing::TestModel;

size_t SkipRoutes(const Manifest& m) {
  size_t routes = 0;
  for (size_t b = 0; b < m.stages.size(); ++b) {
    for (const auto& v : m.stages[b].inputs) {
      routes +=
          v.origin == ValueSource::Origin::StageOutput && v.stage + 1 < static_cast<int64_t>(b);
    }
  }
  return routes;
}

void ExpectEqualToOriginal(const std::string& model, const CompileOptions& options,
                           const at::Tensor& x, double tolerance, bool train = false,
                           bool bitwise_one_chunk = true) {
  TempDir dir;
  CompileModel(TestModel(model), dir.path("m.gpipe"), options);
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"));
  double diff = MaxDiff(RunOriginal(TestModel(model), x, train, 3), RunPipeline(pipe, x, train, 3));
  if (options.chunks == 1 && bitwise_one_chunk) {
    EXPECT_EQ(diff, 0.0) << model << ": one micro-batch must be bitwise equal";
  } else {
    EXPECT_LE(diff, tolerance) << model << " chunks " << options.chunks;
  }
}

TEST(GeneralGraphs, ResNet50FourStages) {
  // Micro-batches of two: LibTorch 1.13's CPU convolution backward for a batch
  // of one is much less accurate (docs/ARCHITECTURE.md, "Numerics").
  torch::manual_seed(0);
  at::Tensor x = torch::randn({8, 3, 32, 32});
  for (int64_t chunks : {1, 4}) ExpectEqualToOriginal("resnet50.pt", Options(4, chunks), x, 1e-5);
}

TEST(GeneralGraphs, ResNet50SplitBeforeNestedBlocks) {
  CompileOptions options = Options(1, 2);
  options.split_before = {"layer2.0", "layer3.0", "layer4.0"};
  TempDir dir;
  auto report = CompileModel(TestModel("resnet50.pt"), dir.path("r.gpipe"), options);
  EXPECT_EQ(report.manifest.stages.size(), 4u);
  EXPECT_FALSE(report.units_chosen);  // the cuts are the user's: no "units chosen" footer
  // Each stage lists the units it runs: the named block starts the next stage
  // (its first unit, layer2.0.conv1, was listed last in the stage before).
  for (size_t s = 1; s < 4; ++s) {
    const std::string& named = options.split_before[s - 1];
    const StageEntry& before = report.manifest.stages[s - 1];
    const StageEntry& stage = report.manifest.stages[s];
    ASSERT_FALSE(stage.units.empty());
    EXPECT_EQ(stage.units.front().rfind(named + ".", 0), 0u) << stage.units.front();
    EXPECT_NE(before.units.back().rfind(named + ".", 0), 0u) << before.units.back();
    EXPECT_TRUE(
        std::any_of(stage.parameters.begin(), stage.parameters.end(),
                    [&](const ParameterEntry& p) { return p.original == named + ".conv1.weight"; }))
        << named;
  }
  torch::manual_seed(0);
  ExpectEqualToOriginal("resnet50.pt", options, torch::randn({8, 3, 32, 32}), 1e-5);
}

TEST(GeneralGraphs, UNetSkipConnectionsTravelAsRoutes) {
  TempDir dir;
  auto report = CompileModel(TestModel("unet.pt"), dir.path("u.gpipe"), Options(3, 1));
  EXPECT_GE(SkipRoutes(report.manifest), 2u);
  // The middle stage neither receives nor returns the encoder outputs it skips.
  EXPECT_EQ(report.manifest.stages[1].inputs.size(), 1u);
  EXPECT_EQ(report.manifest.stages[1].num_outputs, 1);
  torch::manual_seed(0);
  at::Tensor x = torch::randn({4, 3, 16, 16});
  for (int64_t chunks : {1, 4}) ExpectEqualToOriginal("unet.pt", Options(3, chunks), x, 5e-5);
}

TEST(GeneralGraphs, UNetWithPassThroughSkipsIsEqualToo) {
  TempDir dir;
  CompileOptions options = Options(3, 2, CheckpointMode::Always);
  options.skip_routing = SkipRouting::PassThrough;  // the ablation's routing must be exact as well
  auto report = CompileModel(TestModel("unet.pt"), dir.path("u.gpipe"), options);
  EXPECT_EQ(SkipRoutes(report.manifest), 0u);
  EXPECT_GT(report.manifest.stages[1].inputs.size(), 1u) << "the middle stage relays the skips";
  torch::manual_seed(0);
  ExpectEqualToOriginal("unet.pt", options, torch::randn({4, 3, 16, 16}), 5e-5);
}

TEST(GeneralGraphs, TransformerWithTiedEmbeddingTrainsOneWeight) {
  torch::manual_seed(0);
  at::Tensor ids = torch::randint(50, {4, 12});
  for (int64_t chunks : {1, 4}) ExpectEqualToOriginal("gpt.pt", Options(4, chunks), ids, 1e-6);
  // Training mode with dropout: one micro-batch reproduces the original's draws.
  ExpectEqualToOriginal("gpt.pt", Options(4, 1), ids, 0, /*train=*/true);

  TempDir dir;
  auto report = CompileModel(TestModel("gpt.pt"), dir.path("g.gpipe"), Options(4, 2));
  size_t owners = 0;
  for (const auto& st : report.manifest.stages) {
    for (const auto& p : st.parameters) owners += p.original == "tok.weight";
  }
  EXPECT_EQ(owners, 1u) << "the tied weight must exist once";
  Pipeline pipe = Pipeline::load(dir.path("g.gpipe"));
  EXPECT_EQ(pipe.named_parameters().size(),
            torch::jit::load(TestModel("gpt.pt")).parameters().size());
}

TEST(GeneralGraphs, IfNodeNearACutStaysWhole) {
  torch::manual_seed(0);
  for (float sign : {1.0f, -1.0f}) {  // take each branch
    at::Tensor x = torch::rand({6, 4}) * sign + sign;
    for (int64_t chunks : {1, 3}) {
      ExpectEqualToOriginal("branchy.pt", Options(3, chunks), x, 1e-6, false,
                            /*bitwise_one_chunk=*/false);
    }
  }
}

TEST(GeneralGraphs, SeveralInputsTupleOutputAndAnIntAcrossACut) {
  TempDir dir;
  auto report = CompileModel(TestModel("multi_io.pt"), dir.path("io.gpipe"), Options(3, 2));
  EXPECT_EQ(report.manifest.input_names.size(), 3u);
  EXPECT_EQ(report.manifest.outputs.size(), 2u);
  Pipeline pipe = Pipeline::load(dir.path("io.gpipe"));
  torch::manual_seed(0);
  at::Tensor x = torch::randn({6, 6}), y = torch::randn({6, 5});
  std::vector<c10::IValue> inputs{x, y, c10::IValue(int64_t{3})};

  auto original = torch::jit::load(TestModel("multi_io.pt"));
  auto want = original.forward(inputs).toTupleRef().elements();
  auto got = pipe.forward(inputs);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_LE((got[0] - want[0].toTensor()).abs().max().item<double>(), 1e-6);
  EXPECT_LE((got[1] - want[1].toTensor()).abs().max().item<double>(), 1e-6);
  (want[0].toTensor().sum() + want[1].toTensor().sum()).backward();
  (got[0].sum() + got[1].sum()).backward();
  std::map<std::string, at::Tensor> want_grads;
  for (const auto& p : original.named_parameters()) want_grads[p.name] = p.value.grad();
  for (const auto& [name, p] : pipe.named_parameters()) {
    EXPECT_LE((p.grad() - want_grads.at(name)).abs().max().item<double>(), 1e-6) << name;
  }
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(GeneralGraphs, RecomputeDoesNotUpdateBatchNormStatisticsTwice) {
  TempDir dir;
  CompileModel(TestModel("unet.pt"), dir.path("u.gpipe"), Options(3, 2));
  torch::manual_seed(0);
  at::Tensor x = torch::randn({4, 3, 16, 16});
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> buffers;
  for (auto mode : {CheckpointMode::Never, CheckpointMode::Always}) {
    PipelineOptions options;
    options.checkpoint = mode;
    Pipeline pipe = Pipeline::load(dir.path("u.gpipe"), options);
    testing::RunPipeline(pipe, x, /*train=*/true, 0);
    buffers.push_back(pipe.named_buffers());
  }
  ASSERT_EQ(buffers[0].size(), buffers[1].size());
  bool tracked = false;
  for (size_t k = 0; k < buffers[0].size(); ++k) {
    EXPECT_TRUE(torch::equal(buffers[0][k].second, buffers[1][k].second)) << buffers[0][k].first;
    if (buffers[0][k].first == "enc1.1.num_batches_tracked") {
      tracked = true;
      EXPECT_EQ(buffers[1][k].second.item<int64_t>(), 2)
          << "one update per micro-batch, none per recompute";
    }
  }
  EXPECT_TRUE(tracked);
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

std::map<std::string, at::Tensor> OriginalBuffersAfterOneTrainingStep(const at::Tensor& x) {
  auto m = torch::jit::load(TestModel("conv_bn.pt"));
  m.train();
  m.forward({x}).toTensor().sum().backward();
  std::map<std::string, at::Tensor> buffers;
  for (const auto& b : m.named_buffers()) buffers[b.name] = b.value;
  return buffers;
}

TEST(DeferredBatchNorm, RunningStatisticsComeFromTheWholeBatch) {
  torch::manual_seed(0);
  at::Tensor x = torch::randn({8, 3, 6, 6}) * 3 + 1;
  auto want = OriginalBuffersAfterOneTrainingStep(x);
  TempDir dir;
  for (bool deferred : {true, false}) {
    for (auto mode : {CheckpointMode::Never, CheckpointMode::Always}) {
      CompileOptions options = Options(2, 4, mode);
      options.deferred_batch_norm = deferred;
      auto report = CompileModel(TestModel("conv_bn.pt"), dir.path("bn.gpipe"), options);
      EXPECT_EQ(report.manifest.deferred_batch_norm, deferred);
      Pipeline pipe = Pipeline::load(dir.path("bn.gpipe"));
      testing::RunPipeline(pipe, x, /*train=*/true, 0);
      std::map<std::string, at::Tensor> got;
      for (const auto& [name, b] : pipe.named_buffers()) got[name] = b;
      double mean_diff =
          (got.at("1.running_mean") - want.at("1.running_mean")).abs().max().item<double>();
      double var_diff =
          (got.at("1.running_var") - want.at("1.running_var")).abs().max().item<double>();
      if (deferred) {
        EXPECT_LE(mean_diff, 1e-6) << ToString(mode);
        EXPECT_LE(var_diff, 1e-6) << ToString(mode);
        EXPECT_EQ(got.at("1.num_batches_tracked").item<int64_t>(), 1) << ToString(mode);
        EXPECT_EQ(got.at("1.gpipe_calls").item<double>(), 0.0)
            << "accumulators are reset by the commit";
      } else {
        // Four updates from four small batches: visibly not the whole batch's statistics.
        EXPECT_GT(mean_diff, 1e-3);
        EXPECT_EQ(got.at("1.num_batches_tracked").item<int64_t>(), 4);
      }
    }
  }
}

TEST(DeferredBatchNorm, EvalModeIsUnchanged) {
  CompileOptions options = Options(2, 2);
  options.deferred_batch_norm = true;
  torch::manual_seed(0);
  ExpectEqualToOriginal("conv_bn.pt", options, torch::randn({4, 3, 6, 6}), 1e-6);
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(GeneralGraphs, ResNet50CheckpointModesGiveBitwiseEqualGradientsInTraining) {
  TempDir dir;
  CompileModel(TestModel("resnet50.pt"), dir.path("r.gpipe"), Options(4, 4));
  torch::manual_seed(0);
  at::Tensor x = torch::randn({8, 3, 32, 32});
  testing::ExpectCheckpointModesBitwiseEqual(dir.path("r.gpipe"), x, 0);
}

}  // namespace
}  // namespace gpipe
