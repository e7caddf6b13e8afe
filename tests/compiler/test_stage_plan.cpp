#include <gtest/gtest.h>

#include "compiler/stage_plan.h"

namespace gpipe {
namespace {

std::vector<PartitionUnit> Units(size_t n) {
  std::vector<PartitionUnit> units;
  for (size_t i = 0; i < n; ++i) {
    PartitionUnit unit;
    unit.name = std::to_string(i);
    unit.begin = 2 * i;
    unit.end = 2 * i + 2;
    units.push_back(unit);
  }
  return units;
}

std::string ErrorOf(const BalanceRequest& request, size_t units = 9) {
  try {
    PlanStages(Units(units), request);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(StagePlan, BalanceGivesUnitStarts) {
  BalanceRequest request;
  request.balance = {3, 3, 2, 1};
  EXPECT_EQ(PlanStages(Units(9), request).first_node, (std::vector<size_t>{0, 6, 12, 16}));
}

TEST(StagePlan, EvenSplitPutsTheRemainderFirst) {
  EXPECT_EQ(EvenBalance(9, 4), (std::vector<int64_t>{3, 2, 2, 2}));
  BalanceRequest request;
  request.num_stages = 9;
  EXPECT_EQ(PlanStages(Units(9), request).num_stages(), 9u);
}

TEST(StagePlan, BadBalancesNameTheFix) {
  BalanceRequest request;
  request.balance = {3, 3, 2};
  EXPECT_EQ(ErrorOf(request), "--balance sums to 8 but the model has 9 units (top-level "
                              "submodules); make it sum to 9 or use --stages N");
  request.balance = {3, 0, 6};
  EXPECT_EQ(ErrorOf(request), "--balance gives stage 1 0 units; every stage needs at least 1");
  request.balance = {-1, 10};
  EXPECT_NE(ErrorOf(request).find("every stage needs at least 1"), std::string::npos);
  request.balance.clear();
  request.num_stages = 10;
  EXPECT_EQ(ErrorOf(request), "--stages 10 asks for more stages than the model has units: 9 (0, 1, 2, 3, 4, 5, 6, 7, 8), the "
                              "submodule calls that cuts can fall between; use --stages 9 or fewer");
  request.num_stages = 0;
  EXPECT_EQ(ErrorOf(request), "--stages is 0; it must be at least 1");
}

TEST(StagePlan, ParseBalance) {
  EXPECT_EQ(ParseBalance("3,3,2"), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_THROW(ParseBalance("3,x"), c10::Error);
  EXPECT_THROW(ParseBalance("3,,2"), c10::Error);
  EXPECT_THROW(ParseBalance(""), c10::Error);
}

}  // namespace
}  // namespace gpipe

#include "passes/lift_attributes.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using testing::InlinedForward;
using testing::ParentModule;
using testing::ScaleModule;

std::shared_ptr<torch::jit::Graph> Lowered(const torch::jit::Module& m) {
  auto graph = InlinedForward(m);
  LiftAttributes(graph, m._ivalue());
  return graph;
}

torch::jit::Module Nested() {
  auto layer1 = ParentModule("L1", {{"b0", ScaleModule("L1B0", 1.0)}, {"b1", ScaleModule("L1B1", 2.0)}}, R"(
    def forward(self, x):
        return self.b1.forward(self.b0.forward(x))
  )");
  auto layer2 = ParentModule("L2", {{"b0", ScaleModule("L2B0", 3.0)}, {"b1", ScaleModule("L2B1", 4.0)}}, R"(
    def forward(self, x):
        return self.b1.forward(self.b0.forward(x))
  )");
  return ParentModule("Net", {{"layer1", layer1}, {"layer2", layer2}}, R"(
    def forward(self, x):
        return self.layer2.forward(self.layer1.forward(x))
  )");
}

TEST(SplitBefore, CutsBeforeNestedSubmodules) {
  auto graph = Lowered(Nested());
  StagePlan plan = PlanSplitBefore(graph, {"layer2.b0", "layer1.b1"});
  ASSERT_EQ(plan.num_stages(), 3u);
  std::vector<torch::jit::Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  EXPECT_EQ(ModulePathOf(nodes[plan.first_node[1]]), "layer1.b1");
  EXPECT_EQ(ModulePathOf(nodes[plan.first_node[2]]), "layer2.b0");
}

TEST(SplitBefore, UnknownNameListsTheValidOnes) {
  auto graph = Lowered(Nested());
  try {
    PlanSplitBefore(graph, {"layer3"});
    FAIL();
  } catch (const c10::Error& e) {
    EXPECT_EQ(std::string(e.what_without_backtrace()),
              "--split-before: the model has no submodule 'layer3' with operations in forward; "
              "valid names: layer1, layer1.b0, layer1.b1, layer2, layer2.b0, layer2.b1");
  }
  EXPECT_THROW(PlanSplitBefore(graph, {"layer1"}), c10::Error);  // stage 0 would be empty
  EXPECT_THROW(PlanSplitBefore(graph, {"layer2", "layer2.b0"}), c10::Error);  // same place twice
}

}  // namespace
}  // namespace gpipe
