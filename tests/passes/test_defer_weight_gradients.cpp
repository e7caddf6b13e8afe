#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "passes/defer_weight_gradients.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using torch::jit::testing::FileCheck;

TEST(DeferLinearWeightGradients, EveryLinearBecomesGpipeLinearWithItsOperands) {
  auto graph = testing::ParseGraph(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %flag : bool):
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::linear(%x, %w, %b)
  %z : Tensor = prim::If(%flag)
    block0():
      %inner : Tensor = aten::linear(%y, %w, %none)
      -> (%inner)
    block1():
      -> (%y)
  %out : Tensor = aten::relu(%z)
  return (%out))IR");
  EXPECT_EQ(DeferLinearWeightGradients(graph), 2u);
  graph->lint();
  FileCheck()
      .check("Tensor = gpipe::linear(%x, %w, %b)")
      ->check("prim::If")
      ->check("gpipe::linear(%")
      ->check("aten::relu")
      ->run(*graph);
  FileCheck().check_not("aten::linear")->run(*graph);
}

TEST(DeferLinearWeightGradients, AGraphWithoutLinearsIsLeftAsItWas) {
  auto graph = testing::ParseGraph(R"IR(
graph(%x : Tensor, %w : Tensor):
  %y : Tensor = aten::matmul(%x, %w)
  return (%y))IR");
  const std::string before = graph->toString();
  EXPECT_EQ(DeferLinearWeightGradients(graph), 0u);
  EXPECT_EQ(graph->toString(), before);
}

}  // namespace
}  // namespace gpipe
