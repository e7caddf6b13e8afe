// Keyed random numbers (runtime/keyed_random.h): the same key draws the same
// numbers on any thread, another key other numbers, and gpipe::dropout with
// the default generator is aten::dropout.

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <thread>

#include "runtime/keyed_random.h"
#include "runtime/torch_compat.h"

namespace gpipe {
namespace {

at::Tensor Dropout(const at::Tensor& x, int64_t op, bool feature = false, bool alpha = false) {
  static auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("gpipe::dropout", "");
  auto typed = handle.typed<at::Tensor(const at::Tensor&, double, bool, bool, bool,
                                       c10::optional<at::Generator>)>();
  std::optional<at::Generator> g = KeyedGenerator(op);
  return typed.call(x, 0.5, true, feature, alpha, g ? c10::optional<at::Generator>(*g) : c10::nullopt);
}

TEST(KeyedRandom, TheSameKeyDrawsTheSameOnAnyThreadAndAnotherKeyDrawsOthers) {
  const at::Tensor x = torch::ones({64, 32});
  at::Tensor here, again, there, other_mb, other_op, second_call;
  {
    DrawScope scope({7, 3, 1}, c10::Device(c10::kCPU));
    here = Dropout(x, 5);
    second_call = Dropout(x, 5);  // the op's second call in the task: a fresh draw
    other_op = Dropout(x, 6);
  }
  {
    DrawScope scope({7, 3, 1}, c10::Device(c10::kCPU));
    again = Dropout(x, 5);
  }
  std::thread([&] {
    DrawScope scope({7, 3, 1}, c10::Device(c10::kCPU));
    there = Dropout(x, 5);
  }).join();
  {
    DrawScope scope({7, 3, 2}, c10::Device(c10::kCPU));
    other_mb = Dropout(x, 5);
  }
  EXPECT_TRUE(here.equal(again));
  EXPECT_TRUE(here.equal(there));
  EXPECT_FALSE(here.equal(other_mb));
  EXPECT_FALSE(here.equal(other_op));
  EXPECT_FALSE(here.equal(second_call));
  EXPECT_NE(KeyedSeed({7, 3, 1}, 5, 0), KeyedSeed({7, 4, 1}, 5, 0));
  EXPECT_NE(KeyedSeed({8, 3, 1}, 5, 0), KeyedSeed({7, 3, 1}, 5, 0));
}

TEST(KeyedRandom, OutsideAScopeDropoutIsAtensOwnDropout) {
  EXPECT_FALSE(KeyedGenerator(0).has_value());
  const at::Tensor x = torch::randn({16, 8, 4, 4});
  for (bool feature : {false, true}) {
    for (bool alpha : {false, true}) {
      torch::manual_seed(3);
      at::Tensor want = feature ? (alpha ? at::feature_alpha_dropout(x, 0.5, true)
                                         : at::feature_dropout(x, 0.5, true))
                                : (alpha ? at::alpha_dropout(x, 0.5, true) : at::dropout(x, 0.5, true));
      torch::manual_seed(3);
      at::Tensor got = Dropout(x, 0, feature, alpha);
      EXPECT_TRUE(got.equal(want)) << "feature " << feature << " alpha " << alpha;
    }
  }
}

TEST(KeyedRandom, DropoutsGradientIsItsMask) {
  DrawScope scope({1, 0, 0}, c10::Device(c10::kCPU));
  at::Tensor x = torch::ones({8, 8}).requires_grad_(true);
  at::Tensor y = Dropout(x, 0);
  y.sum().backward();
  EXPECT_TRUE(x.grad().equal(y.detach()));  // x is ones: y is the scaled mask
}

// Called boxed, as a stage's TorchScript interpreter calls it.
at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const c10::optional<at::Tensor>& mask, double p, bool causal,
                     c10::optional<at::Generator> g) {
  static auto handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("gpipe::scaled_dot_product_attention", "");
  torch::jit::Stack stack{q, k, v, mask ? c10::IValue(*mask) : c10::IValue(), p, causal,
                          c10::IValue(), false, g ? c10::IValue(*g) : c10::IValue()};
  handle.callBoxed(stack);
  return stack.at(0).toTensor();
}

// The keyed attention draws its dropout mask from the keyed generator (the
// same key, the same output; another micro-batch, another mask) and otherwise
// computes ATen's math path; with dropout 0 it is ATen's op itself (2.x only:
// LibTorch 1.13 has no attention op, but runs the keyed math path).
TEST(KeyedRandom, AttentionWithDropoutIsAtensMathPathWithTheKeyedMask) {
  torch::manual_seed(0);
  const at::Tensor q = torch::randn({2, 3, 5, 8}), k = torch::randn({2, 3, 7, 8}),
                   v = torch::randn({2, 3, 7, 8});
  const at::Tensor mask = torch::rand({5, 7}) > 0.3;
  const double p = 0.25;
  for (bool causal : {false, true}) {
    const c10::optional<at::Tensor> m = causal ? c10::nullopt : c10::optional<at::Tensor>(mask);
    at::Tensor got, again, other_micro_batch;
    {
      DrawScope scope({9, 1, 2}, c10::Device(c10::kCPU));
      got = Attention(q, k, v, m, p, causal, *KeyedGenerator(4));
    }
    {
      DrawScope scope({9, 1, 2}, c10::Device(c10::kCPU));
      again = Attention(q, k, v, m, p, causal, *KeyedGenerator(4));
    }
    {
      DrawScope scope({9, 1, 3}, c10::Device(c10::kCPU));
      other_micro_batch = Attention(q, k, v, m, p, causal, *KeyedGenerator(4));
    }
    EXPECT_TRUE(got.equal(again)) << "causal " << causal;
    EXPECT_FALSE(got.equal(other_micro_batch)) << "causal " << causal;
#if GPIPE_TORCH_AT_LEAST(2, 5)
    // The same mask, drawn as gpipe::dropout draws it, given to ATen's math
    // path, which adds its mask: ATen's op turns a bool mask into 0 / -inf first.
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(KeyedSeed({9, 1, 2}, 4, 0));
    const at::Tensor keep = at::empty({2, 3, 5, 7}).bernoulli_(1 - p, g).to(at::kBool);
    c10::optional<at::Tensor> additive;
    if (m) additive = at::zeros({5, 7}).masked_fill(m->logical_not(), -INFINITY);
    const at::Tensor want = std::get<0>(
        at::_scaled_dot_product_attention_math(q, k, v, additive, p, causal, keep));
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6)) << "causal " << causal << " differs by "
                                                        << (got - want).abs().max().item<double>();
    DrawScope scope({9, 1, 2}, c10::Device(c10::kCPU));  // a generator, but nothing to draw
    EXPECT_TRUE(Attention(q, k, v, m, 0.0, causal, *KeyedGenerator(4))
                    .equal(at::scaled_dot_product_attention(q, k, v, m, 0.0, causal)));
#endif
  }
}

TEST(KeyedRandom, UnkeyedRandomOpsAreFoundAndKeyedOnesAreNot) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%x : Tensor):
  %p : float = prim::Constant[value=0.5]()
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %k : int = prim::Constant[value=0]()
  %g : Generator? = gpipe::keyed_generator(%k)
  %y : Tensor = gpipe::dropout(%x, %p, %t, %f, %f, %g)
  %z : Tensor = aten::bernoulli(%y, %g)
  return (%z))IR", graph.get());
  EXPECT_EQ(FirstUnkeyedRandomOp(*graph), std::nullopt);
  EXPECT_TRUE(HasKeyedRandomOps(*graph));
  auto old = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%x : Tensor):
  %p : float = prim::Constant[value=0.5]()
  %t : bool = prim::Constant[value=1]()
  %y : Tensor = aten::dropout(%x, %p, %t)
  return (%y))IR", old.get());
  EXPECT_EQ(FirstUnkeyedRandomOp(*old), std::optional<std::string>("aten::dropout"));
  EXPECT_FALSE(HasKeyedRandomOps(*old));
}

}  // namespace
}  // namespace gpipe
