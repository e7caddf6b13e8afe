// CopyStreams: the runtime side of copy nodes. On CPU a boundary moves no
// data; the CUDA tests (skipped without a GPU, run by bench/gpu.sh) check that
// copies on the copy streams are ordered against the compute streams, also
// when the source tensor is dropped at once and its memory reused.

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "runtime/copy_streams.h"
#include "runtime/pipeline.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

TEST(CopyStreams, SameDeviceIsNoCopy) {
  CopyStreams copies;
  at::Tensor t = torch::randn({4, 4});
  at::Tensor same = copies.Copy(t, c10::Device(c10::kCPU));
  EXPECT_EQ(same.data_ptr(), t.data_ptr());
  EXPECT_FALSE(copies.Copy(at::Tensor(), c10::Device(c10::kCPU)).defined());
}

bool HasCuda() { return torch::cuda::is_available(); }

TEST(CopyStreams, CudaRoundTripIsOrderedAgainstCompute) {
  if (!HasCuda()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const c10::Device gpu(c10::kCUDA, 0), cpu(c10::kCPU);
  for (bool separate : {true, false}) {
    CopyStreams copies(separate);
    at::Tensor a = torch::randn({2048, 2048});
    at::Tensor want = at::mm(a, a);
    for (int round = 0; round < 4; ++round) {
      at::Tensor on_gpu = copies.Copy(a, gpu);
      // A long kernel on the compute stream, then its result leaves at once:
      // the copy must wait for it, and its memory must not be reused early.
      at::Tensor product = at::mm(on_gpu, on_gpu);
      at::Tensor back = copies.Copy(product, cpu);
      product.reset();
      at::Tensor scribble = at::full({2048, 2048}, 7.0f, on_gpu.options());  // may reuse freed blocks
      EXPECT_LE(testing::ScaledDiff(back, want), 1e-4) << "separate streams " << separate << ", round " << round;
    }
  }
}

TEST(CopyStreams, MixedDevicePipelineEqualsTheOriginal) {
  if (!HasCuda()) GTEST_SKIP() << "no CUDA device in this build or machine";
  testing::TempDir dir;
  CompileModel(testing::TestModel("mlp9.pt"), dir.path("m.gpipe"), testing::Options(3, 4));
  for (bool separate : {true, false}) {
    PipelineOptions options;
    options.devices = {"cuda:0", "cpu", "cuda:0"};  // two boundaries each way, and a CPU input
    options.copy_streams = separate;
    Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
    at::Tensor x1 = torch::randn({12, 16}).requires_grad_();
    at::Tensor x2 = x1.detach().clone().requires_grad_();
    auto want = testing::RunOriginal(testing::TestModel("mlp9.pt"), x1, false, 0);
    auto got = testing::RunPipeline(pipe, x2, false, 0);
    EXPECT_LE(testing::MaxDiff(want, got), 1e-5) << "separate streams " << separate;
    ASSERT_TRUE(got.input_grad.defined());
    EXPECT_TRUE(got.input_grad.device().is_cpu()) << "an input's gradient lives where the input does";
    EXPECT_LE(testing::ScaledDiff(got.input_grad, want.input_grad), 1e-5);
  }
}

}  // namespace
}  // namespace gpipe
