// --activation-budget's choice (compiler/activation_budget.h) on literal
// tables: outputs are kept for free, then products by FLOPs spared per byte
// while they fit; a budget below the outputs names the stage and the least.

#include <gtest/gtest.h>

#include "compiler/activation_budget.h"

namespace gpipe {
namespace {

StageKeepCosts Table(int64_t output_bytes, const std::vector<ProductCost>& products) {
  StageKeepCosts costs;
  costs.output_bytes = output_bytes;
  costs.products = products;
  return costs;
}

// The header's example: a (4 bytes, 40 FLOPs), b (8, 40), c (2, 4); outputs 10.
TEST(ActivationBudget, KeepsTheMostFlopsPerByteThatFit) {
  StageKeepCosts costs = Table(10, {{3, 4, 40, false}, {5, 8, 40, false}, {9, 2, 4, false}});
  BudgetChoice choice = ChooseWithinBudget(costs, 16, 0);
  EXPECT_EQ(choice.saved_nodes, (std::vector<size_t>{3, 9}));
  EXPECT_EQ(choice.kept_bytes, 16);
  EXPECT_EQ(choice.recompute_flops, 40);
  // Room for everything: every product kept, nothing recomputed.
  choice = ChooseWithinBudget(costs, 1000, 0);
  EXPECT_EQ(choice.saved_nodes, (std::vector<size_t>{3, 5, 9}));
  EXPECT_EQ(choice.kept_bytes, 24);
  EXPECT_EQ(choice.recompute_flops, 0);
  // Exactly the outputs: every product recomputed.
  choice = ChooseWithinBudget(costs, 10, 0);
  EXPECT_TRUE(choice.saved_nodes.empty());
  EXPECT_EQ(choice.recompute_flops, 84);
}

TEST(ActivationBudget, AProductHandedOnAnywayIsKeptForFree) {
  StageKeepCosts costs = Table(10, {{2, 8, 1, true}, {4, 4, 40, false}});
  BudgetChoice choice = ChooseWithinBudget(costs, 10, 1);
  EXPECT_EQ(choice.saved_nodes, (std::vector<size_t>{2}));
  EXPECT_EQ(choice.kept_bytes, 10);
  EXPECT_EQ(choice.recompute_flops, 40);
}

TEST(ActivationBudget, ABudgetBelowTheOutputsNamesTheStageAndTheLeast) {
  StageKeepCosts costs = Table(3 << 20, {});
  try {
    ChooseWithinBudget(costs, 1 << 20, 2);
    FAIL() << "a budget below the outputs was accepted";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(),
              "--activation-budget 1.0 MiB is below what stage 2 must keep for each micro-batch in "
              "flight: the tensors it hands on, 3.0 MiB on the sample's micro-batch; give at least "
              "that, or use more --chunks (smaller micro-batches)");
  }
}

// Checked over all stages first: the message names the largest need, not the
// first stage found below the budget, so that giving what it says suffices.
TEST(ActivationBudget, ABudgetBelowSeveralStagesNamesTheLargestNeed) {
  std::vector<StageKeepCosts> costs = {Table(1 << 20, {}), Table(2 << 20, {}), Table(4 << 20, {}),
                                       Table(3 << 20, {})};
  EXPECT_NO_THROW(CheckBudgetCoversEveryStage(costs, 4 << 20));
  try {
    CheckBudgetCoversEveryStage(costs, 3 << 19);
    FAIL() << "a budget below the outputs was accepted";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(),
              "--activation-budget 1.5 MiB is below what stage 2 must keep for each micro-batch in "
              "flight: the tensors it hands on, 4.0 MiB on the sample's micro-batch, the most of "
              "any stage; give at least that, or use more --chunks (smaller micro-batches)");
  }
}

}  // namespace
}  // namespace gpipe
