// Selective checkpointing (--checkpoint selective): each stage keeps the
// outputs of its products with a weight and recomputes the rest in backward.
// The gradients are the unpipelined model's, a recomputed dropout draws the
// same mask, the recompute really runs and reads the saved values, and the
// activations kept between forward and backward shrink.

#include <gtest/gtest.h>

#include <sstream>

#include <torch/script.h>

#include "runtime/artifact.h"
#include "runtime/memory_tracker.h"
#include "runtime/stage.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::MaxDiff;
using testing::RunPipeline;
using testing::TempDir;
using testing::TestModel;

at::Tensor SquaresShare(const at::Tensor& output, int64_t batch) {
  return output.to(at::kDouble).pow(2).sum() / static_cast<double>(batch);
}

Pipeline Load(const std::string& path, CheckpointMode mode) {
  PipelineOptions options;
  options.checkpoint = mode;
  return Pipeline::load(path, options);
}

// Dropout on (train mode): never and selective draw the same masks, so they
// agree to rounding (the replayed products' gradients sum in another order).
void ExpectSelectiveEqualsNeverWithDropout(const std::string& model, const at::Tensor& x) {
  TempDir dir;
  CompileModel(TestModel(model), dir.path("m.gpipe"), testing::Options(3, 4));
  Pipeline never = Load(dir.path("m.gpipe"), CheckpointMode::Never);
  Pipeline selective = Load(dir.path("m.gpipe"), CheckpointMode::Selective);
  auto want = RunPipeline(never, x, /*train=*/true, 11);
  auto got = RunPipeline(selective, x, /*train=*/true, 11);
  EXPECT_LE(MaxDiff(want, got), 1e-5) << model;
  // Dropout was on: another seed gives another output.
  EXPECT_FALSE(RunPipeline(never, x, true, 12).output.equal(want.output)) << model;
}

TEST(SelectiveRecompute, ReplaysDropoutAndMatchesNeverOnTheMlpAndTheGpt) {
  at::manual_seed(0);
  ExpectSelectiveEqualsNeverWithDropout("mlp9.pt", at::randn({12, 16}));
  ExpectSelectiveEqualsNeverWithDropout("gpt.pt", at::randint(50, {8, 8}, at::kLong));
}

TEST(SelectiveRecompute, ConvolutionsOfAResNetReplayTheirGradients) {
  at::manual_seed(1);
  TempDir dir;
  CompileModel(TestModel("resnet50.pt"), dir.path("r.gpipe"), testing::Options(4, 2));
  at::Tensor x = at::randn({4, 3, 32, 32});
  Pipeline never = Load(dir.path("r.gpipe"), CheckpointMode::Never);
  Pipeline selective = Load(dir.path("r.gpipe"), CheckpointMode::Selective);
  EXPECT_LE(MaxDiff(RunPipeline(never, x, false, 0), RunPipeline(selective, x, false, 0)), 1e-5);
  // Every stage saves its convolutions and replays them in the recompute.
  ArtifactReader reader(dir.path("r.gpipe"));
  for (const StageEntry& stage : reader.manifest().stages) {
    std::istringstream bytes(reader.ReadRecord(stage.file));
    torch::jit::Module module = torch::jit::load(bytes);
    const std::string code = module.get_method(kRecomputeMethod).graph()->toString();
    EXPECT_NE(code.find("gpipe::saved_convolution"), std::string::npos) << stage.file;
    EXPECT_EQ(code.find("aten::conv2d"), std::string::npos) << stage.file;
  }
}

// Every (stage, micro-batch) recomputes; the activations kept between
// forward and backward are what the forward saved, well under never's.
TEST(SelectiveRecompute, RecomputesEveryTaskAndKeepsLessThanNever) {
  TempDir dir;
  CompileModel(TestModel("gpt.pt"), dir.path("m.gpipe"), testing::Options(2, 8));
  MemoryTracker::Enable();
  at::Tensor ids = at::randint(50, {64, 16}, at::kLong);
  auto run = [&](CheckpointMode mode) {
    Pipeline pipe = Load(dir.path("m.gpipe"), mode);
    auto step = [&] {
      return pipe.train_step(
          {ids}, [&](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
            return SquaresShare(outputs[0], rows.batch);
          });
    };
    step();
    MemoryTracker::ResetPeaks();
    pipe.set_tracing(true);
    step();
    size_t recomputes = 0;
    for (const auto& r : pipe.take_trace()) recomputes += r.phase == TaskRecord::Phase::Recompute;
    return std::make_pair(MemoryTracker::TotalPeakBytes(), recomputes);
  };
  auto [never, never_recomputes] = run(CheckpointMode::Never);
  auto [selective, selective_recomputes] = run(CheckpointMode::Selective);
  auto [always, always_recomputes] = run(CheckpointMode::Always);
  EXPECT_EQ(never_recomputes, 0u);
  EXPECT_EQ(selective_recomputes, 16u);
  EXPECT_EQ(always_recomputes, 16u);
  std::printf("GPT peak activation bytes: never %lld, selective %lld, always %lld\n",
              static_cast<long long>(never), static_cast<long long>(selective),
              static_cast<long long>(always));
  EXPECT_LT(selective, never * 3 / 4);
  EXPECT_GT(selective, always);  // it keeps the products' outputs
}

}  // namespace
}  // namespace gpipe
