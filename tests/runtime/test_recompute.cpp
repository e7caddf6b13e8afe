#include <gtest/gtest.h>
#include <torch/script.h>

#include "runtime/recompute.h"

namespace gpipe {
namespace {

TEST(Recompute, ScopeFlagsTheThreadAndSnapshotRestoresBuffers) {
  torch::jit::Module m(c10::QualifiedName("__torch__.Counter"));
  m.register_buffer("count", torch::zeros({1}));
  EXPECT_FALSE(is_recomputing());
  {
    BufferSnapshot buffers(m);
    RecomputeScope scope;
    EXPECT_TRUE(is_recomputing());
    m.attr("count").toTensor().add_(5);  // a side effect a recompute repeats
  }
  EXPECT_FALSE(is_recomputing());
  EXPECT_EQ(m.attr("count").toTensor().item<float>(), 0.0f);
}

// The recompute updates copies: the buffers themselves are put back unwritten,
// so a graph that saved them (another micro-batch's batch norm) still runs.
TEST(Recompute, SnapshotPutsBackTheOriginalBuffersUnwrittenInNestedModules) {
  torch::jit::Module inner(c10::QualifiedName("__torch__.Inner"));
  inner.register_buffer("count", torch::zeros({1}));
  torch::jit::Module outer(c10::QualifiedName("__torch__.Outer"));
  outer.register_module("bn", inner);
  const at::Tensor original = inner.attr("count").toTensor();
  const auto version = original._version();
  {
    BufferSnapshot buffers(outer);
    at::Tensor during = outer.attr("bn").toModule().attr("count").toTensor();
    EXPECT_FALSE(during.is_same(original));
    during.add_(5);
  }
  const at::Tensor after = outer.attr("bn").toModule().attr("count").toTensor();
  EXPECT_TRUE(after.is_same(original));
  EXPECT_EQ(original._version(), version);
  EXPECT_EQ(after.item<float>(), 0.0f);
}

TEST(Recompute, IsRegisteredAsATorchScriptOp) {
  auto op = c10::Dispatcher::singleton().findSchema({"gpipe::is_recomputing", ""});
  ASSERT_TRUE(op.has_value());
  auto call = op->typed<bool()>();
  EXPECT_FALSE(call.call());
  RecomputeScope scope;
  EXPECT_TRUE(call.call());
}

}  // namespace
}  // namespace gpipe
