#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/torch.h>

#include "passes/split_for_recompute.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using torch::jit::testing::FileCheck;

auto Parse = testing::ParseGraph;

constexpr const char* kMlp = R"IR(
graph(%x : Tensor, %w1 : Tensor, %w2 : Tensor):
  %none : NoneType = prim::Constant()
  %approx : str = prim::Constant[value="none"]()
  %h : Tensor = aten::linear(%x, %w1, %none)
  %g : Tensor = aten::gelu(%h, %approx)
  %y : Tensor = aten::linear(%g, %w2, %none)
  %t : (Tensor) = prim::TupleConstruct(%y)
  return (%t))IR";

TEST(SplitForRecompute, ForwardReturnsTheSavedValuesAndTheRecomputeReadsThem) {
  auto graph = Parse(kMlp);
  RecomputeGraphs split = SplitForRecompute(graph, /*num_activation_inputs=*/1, {2, 4});
  EXPECT_EQ(split.saved_kinds, (std::vector<std::string>{"aten::linear", "aten::linear"}));
  FileCheck()
      .check("aten::linear(%x, %w1")
      ->check("aten::gelu")
      ->check("aten::linear")
      ->check("(Tensor, Tensor, Tensor) = prim::TupleConstruct")
      ->run(*split.forward_saving);
  // Saved values come right after the activation input, before the weights.
  ASSERT_EQ(split.recompute->inputs().size(), 5u);
  EXPECT_EQ(split.recompute->inputs()[1]->debugName(), "saved0");
  EXPECT_EQ(split.recompute->inputs()[3]->debugName(), "w1");
  FileCheck()
      .check_not("aten::linear")
      ->check("gpipe::saved_linear(%saved0, %x, %w1,")
      ->check("aten::gelu")
      ->check("gpipe::saved_linear(%saved1, ")
      ->check("prim::TupleConstruct")
      ->check_not("aten::linear")
      ->run(*split.recompute);
  // The stage graph itself is untouched.
  FileCheck().check_count("aten::linear", 2)->check_not("gpipe::")->run(*graph);
}

TEST(SplitForRecompute, EachProductKindHasItsReplay) {
  auto graph = Parse(R"IR(
graph(%x : Tensor, %w : Tensor, %k : Tensor):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %ones : int[] = prim::Constant[value=[1, 1]]()
  %c : Tensor = aten::conv2d(%x, %k, %none, %ones, %ones, %ones, %one)
  %m : Tensor = aten::matmul(%c, %w)
  %b : Tensor = aten::bmm(%m, %m)
  %t : (Tensor) = prim::TupleConstruct(%b)
  return (%t))IR");
  RecomputeGraphs split = SplitForRecompute(graph, 1, {3, 4, 5});
  FileCheck()
      .check("gpipe::saved_convolution(%saved0, %x, %k,")
      ->check("gpipe::saved_matmul(%saved1")
      ->check("gpipe::saved_matmul(%saved2")
      ->run(*split.recompute);
}

TEST(SplitForRecompute, NothingSavedIsAPlainRecompute) {
  auto graph = Parse(kMlp);
  RecomputeGraphs split = SplitForRecompute(graph, 1, {});
  EXPECT_TRUE(split.saved_kinds.empty());
  EXPECT_EQ(split.recompute->inputs().size(), graph->inputs().size());
  FileCheck().check_count("aten::linear", 2)->check_not("gpipe::")->run(*split.recompute);
  FileCheck().check("(Tensor) = prim::TupleConstruct")->check("return")->run(*split.forward_saving);
}

}  // namespace
}  // namespace gpipe
