// Every schedule with dropout: draws are keyed (keyed_random.h), so a
// schedule's results depend neither on its threads nor on recomputation, and
// every schedule and checkpoint mode trains to the same weights.

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include <torch/script.h>

#include "tests/e2e/pipeline_harness.h"
#include "tests/e2e/schedule_cases.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::kSchedules;
using testing::ScheduleCase;
using testing::SquaresShare;
using testing::TempDir;
using testing::TestModel;

// Dropout draws by key (keyed_random.h), so a schedule's results depend
// neither on its threads (one per stage, a few shared by all stages, or one
// for all) nor on recomputation.
enum class StageThreads { kDefault, kOnePerStage, kOne };

TEST(Schedules, WithDropoutEachScheduleIsBitwiseTheSameWhateverTheThreadsOrCheckpointing) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), testing::Options(4, 4));
  at::manual_seed(5);
  const at::Tensor x = at::randn({12, 16});
  auto gradients = [&](const ScheduleCase& c, CheckpointMode mode, StageThreads threads,
                       bool train) {
    PipelineOptions options;
    options.schedule = c.schedule;
    options.virtual_stages = c.virtual_stages;
    options.checkpoint = mode;
    options.one_worker = threads == StageThreads::kOne;
    options.share_cpu_threads = threads != StageThreads::kOnePerStage;
    Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
    if (!train) pipe.eval();
    at::manual_seed(11);
    pipe.train_step({x}, [&](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
      return SquaresShare(outputs[0], rows.batch);
    });
    std::vector<at::Tensor> grads;
    for (const auto& [name, p] : pipe.named_parameters()) grads.push_back(p.grad());
    return grads;
  };
  auto same = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    bool equal = a.size() == b.size();
    for (size_t k = 0; equal && k < a.size(); ++k) equal = at::equal(a[k], b[k]);
    return equal;
  };
  // One reference for all: every schedule sums a stage's micro-batches in the same order.
  const auto want = gradients(kSchedules[0], CheckpointMode::Never, StageThreads::kDefault, true);
  for (const ScheduleCase& c : kSchedules) {
    EXPECT_TRUE(same(want, gradients(c, CheckpointMode::Never, StageThreads::kDefault, true)))
        << c.schedule << " against " << kSchedules[0].schedule;
    EXPECT_TRUE(same(want, gradients(c, CheckpointMode::Never, StageThreads::kOne, true)))
        << c.schedule << ": one worker thread";
    EXPECT_TRUE(same(want, gradients(c, CheckpointMode::Never, StageThreads::kOnePerStage, true)))
        << c.schedule << ": one thread per stage";
    EXPECT_TRUE(same(want, gradients(c, CheckpointMode::Always, StageThreads::kDefault, true)))
        << c.schedule << ": always";
    EXPECT_TRUE(same(want, gradients(c, CheckpointMode::ExceptLast, StageThreads::kOne, true)))
        << c.schedule << ": except_last on one worker thread";
    EXPECT_FALSE(same(want, gradients(c, CheckpointMode::Never, StageThreads::kDefault, false)))
        << c.schedule << ": dropout was off";
  }
}

// Keyed draws: with dropout, every schedule and checkpoint mode trains to
// bitwise the same weights. Three SGD steps; the masks are the same
// everywhere, and every schedule sums a stage's micro-batches' weight
// gradients first to last (gpipe's backwards too), so nothing can differ;
// with the shared generator drawn in each schedule's own order the masks
// differed and so did the weights.
void ExpectEveryScheduleAndCheckpointModeTrainsToTheSameWeights(const std::string& model,
                                                                const at::Tensor& x) {
  TempDir dir;
  CompileModel(TestModel(model), dir.path("m.gpipe"), testing::Options(4, 4));
  auto train = [&](const ScheduleCase& c, CheckpointMode mode, uint64_t seed = 11) {
    PipelineOptions options;
    options.schedule = c.schedule;
    options.virtual_stages = c.virtual_stages;
    options.checkpoint = mode;
    Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
    pipe.train();
    at::manual_seed(seed);
    for (int step = 0; step < 3; ++step) {
      for (auto& p : pipe.parameters()) p.mutable_grad() = at::Tensor();
      pipe.train_step({x}, [&](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
        return SquaresShare(outputs[0], rows.batch);
      });
      at::NoGradGuard no_grad;
      for (auto& p : pipe.parameters()) p.sub_(p.grad() * 0.1);
    }
    std::vector<at::Tensor> weights;
    for (const auto& [name, p] : pipe.named_parameters()) weights.push_back(p.detach().clone());
    return weights;
  };
  // The largest difference of any weight, relative to that tensor's largest magnitude.
  auto worst_difference = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      const double scale = std::max(1.0, b[k].abs().max().item<double>());
      worst = std::max(worst, (a[k] - b[k]).abs().max().item<double>() / scale);
    }
    return worst;
  };
  const auto want = train(kSchedules[1], CheckpointMode::Never);
  // The draws matter: another seed draws other masks and trains to other weights.
  const double other_seed = worst_difference(train(kSchedules[1], CheckpointMode::Never, 12), want);
  EXPECT_GT(other_seed, 1e-4) << model;
  for (const ScheduleCase& c : kSchedules) {
    for (CheckpointMode mode : {CheckpointMode::Never, CheckpointMode::Always,
                                CheckpointMode::ExceptLast, CheckpointMode::Selective}) {
      const auto got = train(c, mode);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(worst_difference(got, want), 0.0)
          << model << " " << c.schedule << " " << ToString(mode)
          << ": bitwise (another seed: " << other_seed << ")";
    }
  }
}

TEST(Schedules, WithDropoutEveryScheduleAndCheckpointModeTrainsToTheSameWeights) {
  at::manual_seed(5);
  ExpectEveryScheduleAndCheckpointModeTrainsToTheSameWeights("mlp9.pt", at::randn({12, 16}));
}

// Attention's own dropout (nn.MultiheadAttention: aten::dropout under 1.13,
// inside scaled_dot_product_attention under 2.x, keyed as
// gpipe::scaled_dot_product_attention) trained in train mode.
TEST(Schedules, WithAttentionDropoutEveryScheduleAndCheckpointModeTrainsToTheSameWeights) {
  at::manual_seed(5);
  ExpectEveryScheduleAndCheckpointModeTrainsToTheSameWeights("transformer_encoder.pt",
                                                             at::randn({12, 6, 16}));
}

}  // namespace
}  // namespace gpipe
