#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/torch.h>

#include "passes/defer_batch_norm.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using torch::jit::testing::FileCheck;

auto Parse = testing::ParseGraph;

std::vector<LiftedAttribute> BatchNormAttributes() {
  using K = LiftedAttribute::Kind;
  return {{"bn.weight", K::Parameter, torch::ones({3})},
          {"bn.bias", K::Parameter, torch::zeros({3})},
          {"bn.running_mean", K::Buffer, torch::zeros({3})},
          {"bn.running_var", K::Buffer, torch::ones({3})},
          {"training", K::TrainingFlag, true}};
}

TEST(DeferBatchNorm, RewritesBatchNormWithRunningStatistics) {
  auto graph = Parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %rm : Tensor, %rv : Tensor, %training : bool):
  %m : float = prim::Constant[value=0.1]()
  %eps : float = prim::Constant[value=1e-05]()
  %c : bool = prim::Constant[value=1]()
  %y : Tensor = aten::batch_norm(%x, %w, %b, %rm, %rv, %training, %m, %eps, %c)
  return (%y))IR");
  auto attributes = BatchNormAttributes();
  auto deferred = DeferBatchNorm(graph, attributes, /*num_model_inputs=*/1);
  ASSERT_EQ(deferred.size(), 1u);
  EXPECT_EQ(deferred[0].running_mean, 2u);
  EXPECT_EQ(deferred[0].running_var, 3u);
  EXPECT_DOUBLE_EQ(deferred[0].momentum, 0.1);
  EXPECT_EQ(deferred[0].num_batches_tracked, -1);
  ASSERT_EQ(attributes.size(), 9u);  // four accumulators appended, also as graph inputs
  EXPECT_EQ(attributes[deferred[0].sum].name, "bn.gpipe_sum");
  EXPECT_EQ(attributes[deferred[0].sum].value.toTensor().scalar_type(), at::kDouble);
  EXPECT_EQ(graph->inputs().size(), 10u);
  // Training branch: no running statistics, and the sums; eval branch: as before.
  FileCheck()
      .check("prim::If(%training)")
      ->check("aten::add_")
      ->check("aten::batch_norm")
      ->check("aten::batch_norm(%x, %w, %b, %rm, %rv")
      ->run(*graph);
  graph->lint();
}

TEST(DeferBatchNorm, LeavesBatchNormWithoutRunningStatisticsAlone) {
  auto graph = Parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %training : bool):
  %none : NoneType = prim::Constant()
  %m : float = prim::Constant[value=0.1]()
  %eps : float = prim::Constant[value=1e-05]()
  %c : bool = prim::Constant[value=1]()
  %y : Tensor = aten::batch_norm(%x, %w, %b, %none, %none, %training, %m, %eps, %c)
  return (%y))IR");
  using K = LiftedAttribute::Kind;
  std::vector<LiftedAttribute> attributes{{"bn.weight", K::Parameter, torch::ones({3})},
                                          {"bn.bias", K::Parameter, torch::zeros({3})},
                                          {"training", K::TrainingFlag, true}};
  EXPECT_TRUE(DeferBatchNorm(graph, attributes, 1).empty());
  EXPECT_EQ(attributes.size(), 3u);
  FileCheck().check_count("aten::batch_norm", 1, /*exactly=*/true)->check_not("prim::If")->run(*graph);
}

}  // namespace
}  // namespace gpipe
