// The correctness contract: a pipelined model computes the original model's
// outputs and parameter gradients. Runs use the simple graph executor
// (tests/test_main.cpp). With one micro-batch the pipeline runs the very same
// kernels on the very same tensors, so results are bitwise equal. With
// several, each Linear's weight gradient is a sum over micro-batches instead
// of one GEMM over the batch (and GEMMs of other heights round differently),
// so the last bits differ: there we allow a scaled difference of 1e-6
// (|got - want| / max(1, max|want|), ten times tighter than DESIGN.md's 1e-5).

#include <gtest/gtest.h>

#include <limits>

#include "runtime/pipeline_error.h"
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

// Stages with the calling thread's intra-op thread count, the one the
// original runs with: some BLAS libraries (pip torch's MKL on an AMD EPYC)
// round a matrix product differently for another thread count, so only
// equal counts can promise bitwise equal results.
Pipeline LoadWithTheOriginalsThreads(const std::string& path) {
  PipelineOptions options;
  options.threads_per_stage = at::get_num_threads();
  return Pipeline::load(path, options);
}

class SequentialSplit : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(SequentialSplit, OutputsAndGradientsEqualTheOriginal) {
  auto [stages, chunks] = GetParam();
  TempDir dir;
  auto report = CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(stages, chunks));
  ASSERT_EQ(report.manifest.stages.size(), static_cast<size_t>(stages));
  Pipeline pipe = LoadWithTheOriginalsThreads(dir.path("m.gpipe"));
  torch::manual_seed(1);
  at::Tensor x = torch::randn({10, 16});  // 10 rows: chunks 3 -> 4,3,3 and chunks 8 -> 2,2,1,...

  double diff = MaxDiff(RunOriginal(TestModel("mlp9.pt"), x, false, 0), RunPipeline(pipe, x, false, 0));
  if (chunks == 1) {
    EXPECT_EQ(diff, 0.0) << "one micro-batch must be bitwise equal";
  } else {
    EXPECT_LE(diff, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(StagesAndChunks, SequentialSplit,
                         ::testing::Combine(::testing::Values(1, 2, 3, 8), ::testing::Values(1, 3, 8)));

TEST(PipelineEquality, DropoutInTrainingWithOneMicroBatchIsBitwiseEqual) {
  // One micro-batch: every stage draws its dropout masks with the key the
  // whole (unsplit, keyed) model draws with.
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(4, 1));
  Pipeline pipe = LoadWithTheOriginalsThreads(dir.path("m.gpipe"));
  at::Tensor x = torch::randn({6, 16});
  auto want = RunOriginal(TestModel("mlp9.pt"), x, true, 42);
  auto got = RunPipeline(pipe, x, true, 42);
  EXPECT_EQ(MaxDiff(want, got), 0.0);
  // Dropout was really on: eval mode gives another output.
  EXPECT_GT((RunOriginal(TestModel("mlp9.pt"), x, false, 42).output - want.output).abs().max().item<double>(), 0.0);
}

TEST(PipelineEquality, CheckpointModesGiveBitwiseEqualGradientsWithDropout) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(3, 4));
  at::Tensor x = torch::randn({12, 16});
  testing::ExpectCheckpointModesBitwiseEqual(dir.path("m.gpipe"), x, 7);
}

TEST(PipelineEquality, InputGradientMatches) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(3, 1));
  Pipeline pipe = LoadWithTheOriginalsThreads(dir.path("m.gpipe"));
  at::Tensor x1 = torch::randn({5, 16}).requires_grad_();
  at::Tensor x2 = x1.detach().clone().requires_grad_();
  auto want = RunOriginal(TestModel("mlp9.pt"), x1, false, 0);
  auto got = RunPipeline(pipe, x2, false, 0);
  ASSERT_TRUE(got.input_grad.defined());
  EXPECT_TRUE(torch::equal(want.input_grad, got.input_grad));
}

TEST(PipelineEquality, InferenceUnderNoGradBuildsNoGraph) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(2, 2));
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"));
  pipe.eval();
  torch::NoGradGuard no_grad;
  at::Tensor out = pipe.forward(torch::randn({4, 16}));
  EXPECT_FALSE(out.requires_grad());
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 8}));
}

TEST(PipelineEquality, SecondBackwardThroughOneForwardIsAClearError) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(2, 2));
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"));
  at::Tensor out = pipe.forward(torch::randn({4, 16}));
  out.sum().backward({}, /*retain_graph=*/true);
  try {
    out.sum().backward();
    FAIL();
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("backward ran twice through the same pipelined forward"),
              std::string::npos);
  }
}

size_t ThreadCount() {
  size_t n = 0;
  for (const auto& entry : boost::filesystem::directory_iterator("/proc/self/task"))
    n += boost::filesystem::exists(entry.status());
  return n;
}

TEST(PipelineFailure, ExceptionNamesStageAndMicroBatchAndTheNextStepWorks) {
  TempDir dir;
  CompileModel(TestModel("failing.pt"), dir.path("f.gpipe"), Options(3, 8));
  Pipeline pipe = Pipeline::load(dir.path("f.gpipe"));
  at::Tensor x = torch::randn({8, 4});
  x[3].fill_(1e6);  // micro-batch 3 of 8 carries the marker
  pipe.forward(torch::randn({8, 4})).sum().backward();  // workers started
  size_t threads = ThreadCount();
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      pipe.forward(x);
      FAIL() << "expected the stage to fail";
    } catch (const PipelineError& e) {
      EXPECT_EQ(e.stage(), 1u);
      EXPECT_EQ(e.micro_batch(), 3u);
      std::string what = e.what();
      EXPECT_NE(what.find("stage 1, micro-batch 3 (forward)"), std::string::npos) << what;
      EXPECT_NE(what.find("FailOnMarker saw the marker row"), std::string::npos) << what;
    }
  }
  at::Tensor out = pipe.forward(torch::randn({8, 4}));
  out.sum().backward();
  for (const auto& p : pipe.parameters()) EXPECT_TRUE(p.grad().defined());
  EXPECT_EQ(ThreadCount(), threads) << "a failed step must not leave threads behind";
}

TEST(PipelineArtifact, SaveAfterTrainingReloadsTheSameWeights) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(3, 2));
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"));
  torch::optim::SGD sgd(pipe.parameters(), 0.1);
  at::Tensor x = torch::randn({8, 16});
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    pipe.forward(x).pow(2).mean().backward();
    sgd.step();
  }
  pipe.save(dir.path("trained.gpipe"));
  Pipeline again = Pipeline::load(dir.path("trained.gpipe"));
  auto before = pipe.named_parameters();
  auto after = again.named_parameters();
  ASSERT_EQ(before.size(), after.size());
  std::map<std::string, at::Tensor> original;
  for (const auto& p : torch::jit::load(TestModel("mlp9.pt")).named_parameters()) original[p.name] = p.value;
  bool changed = false;
  for (size_t k = 0; k < before.size(); ++k) {
    EXPECT_EQ(before[k].first, after[k].first);
    EXPECT_TRUE(torch::equal(before[k].second, after[k].second)) << before[k].first;
    changed = changed || !torch::equal(after[k].second, original.at(after[k].first));
  }
  EXPECT_TRUE(changed) << "training did not change any weight";
  pipe.eval();
  again.eval();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(pipe.forward(x), again.forward(x)));
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(PipelineFailure, DetectAnomalyNamesTheFirstStageAndMicroBatchWithNaN) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(3, 4));
  PipelineOptions options;
  options.detect_anomaly = true;
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
  pipe.eval();
  at::Tensor x = torch::randn({8, 16});
  x[5][3] = std::numeric_limits<float>::infinity();  // rows 4-5 are micro-batch 2
  try {
    pipe.forward(x);
    FAIL() << "expected the anomaly to be reported";
  } catch (const PipelineError& e) {
    EXPECT_EQ(e.stage(), 0u);
    EXPECT_EQ(e.micro_batch(), 2u);
    EXPECT_NE(std::string(e.what()).find("non-finite values (NaN or Inf) in output 0"), std::string::npos) << e.what();
  }
  // Without the option the same input runs through and yields NaN.
  Pipeline unchecked = Pipeline::load(dir.path("m.gpipe"));
  unchecked.eval();
  EXPECT_TRUE(unchecked.forward(x).isnan().any().item<bool>());
  // And a finite step still works with checking on.
  EXPECT_TRUE(pipe.forward(torch::randn({8, 16})).isfinite().all().item<bool>());
}

}  // namespace
}  // namespace gpipe
