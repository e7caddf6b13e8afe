// Linear layers' weight gradients deferred across micro-batches
// (runtime/deferred_weight_grads.h), through the op the pass inserts.

#include <gtest/gtest.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "runtime/deferred_weight_grads.h"
#include "runtime/recompute.h"

namespace gpipe {
namespace {

at::Tensor GpipeLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  (void)is_recomputing();  // links the gpipe op library in
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpipe::linear", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const c10::optional<at::Tensor>&)>();
  return op.call(x, w, b);
}

struct Layer {
  at::Tensor weight = torch::randn({5, 3}).requires_grad_(true);
  at::Tensor bias = torch::randn({5}).requires_grad_(true);
};

// Micro-batch i's input and upstream gradient (rows differ per micro-batch).
at::Tensor InputOf(size_t i) {
  return torch::randn({2 + static_cast<int64_t>(i), 3}, torch::dtype(torch::kFloat))
      .requires_grad_(true);
}

TEST(DeferredWeightGrads, BackwardsLeaveTheWeightAloneAndAFlushAddsOneProductInMicroBatchOrder) {
  torch::manual_seed(0);
  Layer layer;
  const size_t m = 3;
  std::vector<at::Tensor> inputs, upstream;
  for (size_t i = 0; i < m; ++i) {
    inputs.push_back(InputOf(i));
    upstream.push_back(torch::randn({inputs[i].size(0), 5}));
  }
  auto deferred = c10::make_intrusive<DeferredWeightGrads>(
      std::vector<at::Tensor>{layer.weight, layer.bias}, m);
  // The schedule runs them last first (as gpipe does); the sum comes out in micro-batch order.
  for (size_t i = m; i-- > 0;) {
    at::Tensor y;
    {
      DeferWeightGradsScope scope(deferred, i);
      y = GpipeLinear(inputs[i], layer.weight, layer.bias);
    }
    EXPECT_TRUE(
        y.equal(at::linear(inputs[i].detach(), layer.weight.detach(), layer.bias.detach())));
    y.backward(upstream[i]);
    deferred->MarkDone(i);
    // The input's gradient at once, as aten's: upstream . W.
    EXPECT_TRUE(inputs[i].grad().equal(upstream[i].mm(layer.weight.detach()))) << i;
    EXPECT_FALSE(layer.weight.grad().defined()) << "deferred, not added by backward " << i;
  }
  deferred->Flush(/*everything=*/true);
  at::Tensor x = torch::cat({inputs[0], inputs[1], inputs[2]}).detach();
  at::Tensor dy = torch::cat(upstream);
  EXPECT_TRUE(layer.weight.grad().equal(dy.t().mm(x))) << "one product over every row, in order";
  EXPECT_TRUE(layer.bias.grad().equal(dy.sum(0)));
  // What each micro-batch's own backward would have added up to, but for rounding.
  at::Tensor per_micro_batch = torch::zeros({5, 3});
  for (size_t i = 0; i < m; ++i) per_micro_batch += upstream[i].t().mm(inputs[i].detach());
  EXPECT_TRUE(torch::allclose(layer.weight.grad(), per_micro_batch, 1e-5, 1e-6));
}

TEST(DeferredWeightGrads, GroupsAreFixedByIndexAndFlushOnlyWhenAllTheirBackwardsAreDone) {
  torch::manual_seed(1);
  // A 2 x 2 weight (16 bytes) against rows of 64 bytes per micro-batch: a
  // group holds at most half the weight's bytes, so each micro-batch is its own.
  at::Tensor weight = torch::randn({2, 2}).requires_grad_(true);
  auto deferred = c10::make_intrusive<DeferredWeightGrads>(std::vector<at::Tensor>{weight}, 2);
  auto run = [&](size_t i) {
    at::Tensor x = torch::randn({4, 2}), up = torch::randn({4, 2});
    {
      DeferWeightGradsScope scope(deferred, i);
      GpipeLinear(x, weight, at::Tensor()).backward(up);
    }
    deferred->MarkDone(i);
    return up.t().mm(x);
  };
  at::Tensor first = run(1);
  deferred->Flush(false);
  EXPECT_TRUE(weight.grad().equal(first)) << "micro-batch 1 is a group of its own";
  at::Tensor second = run(0);
  deferred->Flush(false);
  EXPECT_TRUE(weight.grad().equal(first + second));

  // A large weight: every micro-batch shares one product, flushed when all are done.
  at::Tensor big = torch::randn({64, 64}).requires_grad_(true);
  auto together = c10::make_intrusive<DeferredWeightGrads>(std::vector<at::Tensor>{big}, 2);
  for (size_t i = 0; i < 2; ++i) {
    {
      DeferWeightGradsScope scope(together, i);
      GpipeLinear(torch::randn({2, 64}), big, at::Tensor()).sum().backward();
    }
    together->MarkDone(i);
    if (i == 0) {
      together->Flush(false);
      EXPECT_FALSE(big.grad().defined()) << "the group of micro-batches 0 and 1 is not complete";
    }
  }
  together->Flush(false);
  EXPECT_TRUE(big.grad().defined());
}

// Only the stage's own parameters defer: a weight that arrives as a stage
// input (a tied embedding) gets its gradient from backward at once, as does
// every linear outside a scope or without grad mode.
TEST(DeferredWeightGrads, OnlyTheStagesOwnParametersDeferAndOnlyInsideAScope) {
  torch::manual_seed(2);
  Layer own;
  at::Tensor tied = torch::randn({5, 3}).requires_grad_(true);
  auto deferred = c10::make_intrusive<DeferredWeightGrads>(std::vector<at::Tensor>{own.weight}, 1);
  at::Tensor x = torch::randn({2, 3});
  {
    DeferWeightGradsScope scope(deferred, 0);
    EXPECT_TRUE(DefersWeightGrad(own.weight, own.bias));
    EXPECT_FALSE(DefersWeightGrad(tied, c10::nullopt));
    GpipeLinear(x, tied, at::Tensor()).sum().backward();
    {
      at::NoGradGuard no_grad;
      EXPECT_FALSE(DefersWeightGrad(own.weight, own.bias));
    }
  }
  EXPECT_TRUE(tied.grad().defined());
  EXPECT_FALSE(DefersWeightGrad(own.weight, own.bias)) << "outside any scope";
  GpipeLinear(x, own.weight, own.bias).sum().backward();
  EXPECT_TRUE(own.weight.grad().equal(torch::ones({2, 5}).t().mm(x)));
}

}  // namespace
}  // namespace gpipe
