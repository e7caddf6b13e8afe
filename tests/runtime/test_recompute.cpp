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
