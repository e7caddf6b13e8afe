#include <gtest/gtest.h>
#include <torch/torch.h>

#include "passes/replayable_products.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

// One table: each product kind and the op that replays it; the rest are not products.
TEST(ReplayableProducts, TheTableOfKindsAndTheirReplayOps) {
  auto graph = testing::ParseGraph(R"IR(
graph(%x : Tensor, %w : Tensor, %c : Tensor):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %ones : int[] = prim::Constant[value=[1, 1]]()
  %zeros : int[] = prim::Constant[value=[0, 0]]()
  %same : str = prim::Constant[value="same"]()
  %a : Tensor = aten::linear(%x, %w, %none)
  %b : Tensor = aten::matmul(%a, %w)
  %d : Tensor = aten::conv2d(%c, %w, %none, %ones, %zeros, %ones, %one)
  %e : Tensor = aten::conv2d(%c, %w, %none, %ones, %same, %ones, %one)
  %f : Tensor = aten::relu(%b)
  %g : Tensor = aten::bmm(%f, %f)
  %h : Tensor = aten::mm(%g, %w)
  %k : Tensor = aten::add_(%h, %one, %one)
  %t : (Tensor, Tensor, Tensor, Tensor) = prim::TupleConstruct(%d, %e, %k, %a)
  return (%t))IR");
  EXPECT_EQ(ReplayableProducts(graph), (std::vector<size_t>{5, 6, 7, 10, 11}));
  std::vector<const torch::jit::Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  EXPECT_EQ(ReplayOpOf(nodes[5])->toQualString(), std::string("gpipe::saved_linear"));
  EXPECT_EQ(ReplayOpOf(nodes[6])->toQualString(), std::string("gpipe::saved_matmul"));
  EXPECT_EQ(ReplayOpOf(nodes[7])->toQualString(), std::string("gpipe::saved_convolution"));
  EXPECT_FALSE(ReplayOpOf(nodes[8]));  // padding="same"
  EXPECT_FALSE(ReplayOpOf(nodes[9]));  // relu
  EXPECT_EQ(ReplayOpOf(nodes[10])->toQualString(), std::string("gpipe::saved_matmul"));
  // %h is written in place by add_: replaying it would apply the write twice.
  EXPECT_EQ(SavableProducts(graph), (std::vector<size_t>{5, 6, 7, 10}));
}

}  // namespace
}  // namespace gpipe
