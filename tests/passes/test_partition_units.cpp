#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include "passes/partition_units.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using testing::InlinedForward;
using testing::ParentModule;
using testing::ScaleModule;

auto Names = [](const std::vector<PartitionUnit>& units) { return testing::UnitNames(units); };

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
  size_t index = 0, subs = 0;
  for (auto* node : graph->nodes()) {
    if (node->kind() == c10::aten::sub) {
      ++subs;
      EXPECT_GE(index, units[1].begin);
      EXPECT_LT(index, units[1].end);
    }
    ++index;
  }
  EXPECT_EQ(subs, 1u);  // the root node was looked at, not skipped
}

TEST(PartitionUnits, TrailingGlueOfARefinedBlockStaysInsideIt) {
  // The block's own `y * 2.0` (like a dense block's final torch.cat) follows
  // its last child; at depth 2 it must not join `head`, outside the block.
  auto block = ParentModule("GlueBlock", {{"c0", ScaleModule("GC0", 1.0)}, {"c1", ScaleModule("GC1", 2.0)}}, R"(
    def forward(self, x):
        y = self.c1.forward(self.c0.forward(x))
        return y * 2.0
  )");
  auto m = ParentModule("GlueTop", {{"block", block}, {"head", ScaleModule("GHead", 3.0)}}, R"(
    def forward(self, x):
        return self.head.forward(self.block.forward(x))
  )");
  auto graph = InlinedForward(m);
  auto units = FindPartitionUnits(graph, 2);
  ASSERT_EQ(Names(units), (std::vector<std::string>{"block.c0", "block.c1", "head"}));
  size_t index = 0;
  for (auto* node : graph->nodes()) {
    if (node->kind() == c10::aten::mul && ModulePathOf(node) == "block") {
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
