#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include "passes/partition_units.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using testing::InlinedForward;
using testing::ParentModule;
using testing::ScaleModule;

std::vector<std::string> Names(const std::vector<PartitionUnit>& units) {
  std::vector<std::string> names;
  for (const auto& u : units) names.push_back(u.name);
  return names;
}

TEST(PartitionUnits, OneUnitPerChildCall) {
  auto m = ParentModule("Seq", {{"l0", ScaleModule("U0", 1.0)}, {"l1", ScaleModule("U1", 2.0)},
                                {"l2", ScaleModule("U2", 3.0)}},
                        R"(
    def forward(self, x):
        return self.l2.forward(self.l1.forward(self.l0.forward(x)))
  )");
  auto graph = InlinedForward(m);
  auto units = FindPartitionUnits(graph);
  EXPECT_EQ(Names(units), (std::vector<std::string>{"l0", "l1", "l2"}));
  // Units tile the node list with no gaps.
  EXPECT_EQ(units.front().begin, 0u);
  EXPECT_EQ(units[0].end, units[1].begin);
  EXPECT_EQ(units[1].end, units[2].begin);
  EXPECT_EQ(units.back().end, static_cast<size_t>(std::distance(graph->nodes().begin(), graph->nodes().end())));
}

TEST(PartitionUnits, SecondCallOfAModuleIsItsOwnUnit) {
  auto m = ParentModule("Twice", {{"a", ScaleModule("TwA", 1.0)}, {"b", ScaleModule("TwB", 2.0)}}, R"(
    def forward(self, x):
        return self.a.forward(self.b.forward(self.a.forward(x)))
  )");
  EXPECT_EQ(Names(FindPartitionUnits(InlinedForward(m))),
            (std::vector<std::string>{"a", "b", "a#2"}));
}

TEST(PartitionUnits, RootNodesJoinTheUnitTheyFeed) {
  auto m = ParentModule("Root", {{"a", ScaleModule("RA", 1.0)}, {"b", ScaleModule("RB", 2.0)}}, R"(
    def forward(self, x):
        y = self.a.forward(x)
        y = y - 3
        return self.b.forward(y)
  )");
  auto graph = InlinedForward(m);
  auto units = FindPartitionUnits(graph);
  ASSERT_EQ(Names(units), (std::vector<std::string>{"a", "b"}));
  size_t index = 0;
  for (auto* node : graph->nodes()) {
    if (node->kind() == c10::aten::sub) {
      EXPECT_GE(index, units[1].begin);
      EXPECT_LT(index, units[1].end);
    }
    ++index;
  }
}

TEST(PartitionUnits, GraphWithoutCallStacksIsOneUnit) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%x : Tensor):
  %a : Tensor = a::aaa(%x)
  %b : Tensor = a::bbb(%a)
  return (%b))IR", graph.get());
  auto units = FindPartitionUnits(graph);
  ASSERT_EQ(units.size(), 1u);
  EXPECT_EQ(units[0].name, "");
  EXPECT_EQ(units[0].end, 2u);
}

}  // namespace
}  // namespace gpipe
