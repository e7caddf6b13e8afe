#include <gtest/gtest.h>
#include <torch/torch.h>

#include "passes/choose_saved_values.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

auto Parse = testing::ParseGraph;

// A transformer block's shape: a pointwise op, the QKV projection (a weight),
// attention (activation x activation products), an MLP with GELU.
constexpr const char* kBlock = R"IR(
graph(%x : Tensor, %w_qkv : Tensor, %w_fc : Tensor, %w_out : Tensor):
  %none : NoneType = prim::Constant()
  %eps : float = prim::Constant[value=1e-05]()
  %shape : int[] = prim::Constant[value=[4]]()
  %m1 : int = prim::Constant[value=-1]()
  %m2 : int = prim::Constant[value=-2]()
  %approx : str = prim::Constant[value="none"]()
  %ln : Tensor = aten::relu(%x)
  %qkv : Tensor = aten::linear(%ln, %w_qkv, %none)
  %kt : Tensor = aten::transpose(%qkv, %m2, %m1)
  %scores : Tensor = aten::matmul(%qkv, %kt)
  %p : Tensor = aten::softmax(%scores, %m1, %none)
  %attn : Tensor = aten::matmul(%p, %qkv)
  %wt : Tensor = aten::t(%w_fc)
  %h : Tensor = aten::matmul(%attn, %wt)
  %g : Tensor = aten::gelu(%h, %approx)
  %y : Tensor = aten::linear(%g, %w_out, %none)
  %t : (Tensor) = prim::TupleConstruct(%y)
  return (%t))IR";

// Node indices in kBlock (constants count): 6 relu, 7 qkv linear,
// 9 scores matmul, 11 attn matmul, 13 h matmul, 15 out linear.
TEST(ChooseSelectiveSaves, KeepsProductsWithAWeightAndRecomputesAttention) {
  auto graph = Parse(kBlock);
  auto saved = ChooseSelectiveSaves(graph, {false, true, true, true});
  EXPECT_EQ(saved, (std::vector<size_t>{7, 13, 15}));
}

TEST(ChooseSelectiveSaves, ATiedWeightRoutedInAsAnActivationIsAWeightWhenMarkedSo) {
  auto graph = Parse(kBlock);
  // %w_fc unmarked: its matmul is an activation product, recomputed; linear is always a product
  // with a weight.
  EXPECT_EQ(ChooseSelectiveSaves(graph, {false, true, false, true}), (std::vector<size_t>{7, 15}));
}

TEST(ChooseSelectiveSaves, AnOutputWrittenInPlaceLaterIsRecomputed) {
  auto graph = Parse(R"IR(
graph(%x : Tensor, %w : Tensor, %v : Tensor):
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::linear(%x, %w, %none)
  %r : Tensor = aten::relu_(%y)
  %z : Tensor = aten::linear(%r, %v, %none)
  %t : (Tensor) = prim::TupleConstruct(%z)
  return (%t))IR");
  EXPECT_EQ(ChooseSelectiveSaves(graph, {false, true, true}), (std::vector<size_t>{3}));
}

TEST(ChooseSelectiveSaves, NothingToSaveWithoutProducts) {
  auto graph = Parse(R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::relu(%x)
  %z : Tensor = aten::sigmoid(%y)
  %t : (Tensor) = prim::TupleConstruct(%z)
  return (%t))IR");
  EXPECT_TRUE(ChooseSelectiveSaves(graph, {false}).empty());
}

TEST(ChooseSelectiveSaves, AConvolutionWithStringPaddingIsRecomputed) {
  auto graph = Parse(R"IR(
graph(%x : Tensor, %w : Tensor):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %ones : int[] = prim::Constant[value=[1, 1]]()
  %same : str = prim::Constant[value="same"]()
  %a : Tensor = aten::conv2d(%x, %w, %none, %ones, %ones, %ones, %one)
  %b : Tensor = aten::conv2d(%a, %w, %none, %ones, %same, %ones, %one)
  %t : (Tensor) = prim::TupleConstruct(%b)
  return (%t))IR");
  EXPECT_EQ(ChooseSelectiveSaves(graph, {false, true}), (std::vector<size_t>{4}));
}

}  // namespace
}  // namespace gpipe
