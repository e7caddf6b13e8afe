#include <gtest/gtest.h>

#include "compiler/model_loader.h"
#include "compiler/unit_chooser.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using testing::ParentModule;
using testing::ScaleModule;

auto Names = [](const std::vector<PartitionUnit>& units) { return testing::UnitNames(units); };

// A block of `n` scaling layers l0..l{n-1}, called in order.
torch::jit::Module Block(const std::string& name, int n) {
  std::vector<std::pair<std::string, torch::jit::Module>> children;
  std::string body = "\n    def forward(self, x):\n";
  for (int k = 0; k < n; ++k) {
    children.emplace_back("l" + std::to_string(k),
                          ScaleModule(name + "L" + std::to_string(k), 1.0));
    body += "        x = self.l" + std::to_string(k) + ".forward(x)\n";
  }
  body += "        return x\n";
  return ParentModule(name, children, body);
}

std::vector<PartitionUnit> Choose(const torch::jit::Module& m, size_t stages) {
  LoweredModel lowered = LowerModel(m);
  return ChooseUnits(ModuleTree(lowered.graph), stages);
}

TEST(UnitChooser, TwoChildModelSplitFourWaysDescendsIntoBoth) {
  auto m = ParentModule("TwoKids", {{"enc", Block("Enc", 3)}, {"dec", Block("Dec", 3)}}, R"(
    def forward(self, x):
        return self.dec.forward(self.enc.forward(x))
  )");
  EXPECT_EQ(Names(Choose(m, 1)), (std::vector<std::string>{"enc", "dec"}));
  EXPECT_EQ(Names(Choose(m, 2)), (std::vector<std::string>{"enc", "dec"}));
  EXPECT_EQ(Names(Choose(m, 4)),
            (std::vector<std::string>{"enc.l0", "enc.l1", "enc.l2", "dec.l0", "dec.l1", "dec.l2"}));
}

TEST(UnitChooser, AChildHoldingNinetyPercentIsSplit) {
  auto m =
      ParentModule("Lopsided", {{"big", Block("Big", 9)}, {"small", ScaleModule("Small", 1.0)}}, R"(
    def forward(self, x):
        return self.small.forward(self.big.forward(x))
  )");
  auto top = FindPartitionUnits(LowerModel(m).graph, 1);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_NEAR(top[0].weight / (top[0].weight + top[1].weight), 0.9, 1e-9);
  auto units = Choose(m, 2);
  ASSERT_EQ(units.size(), 10u);
  EXPECT_EQ(units.front().name, "big.l0");
  EXPECT_EQ(units.back().name, "small");
  EXPECT_NEAR(LargestStageShare(units, 2), 0.5, 1e-9);
}

TEST(UnitChooser, StopsAtTheLeavesAndRefinesRequiredCuts) {
  auto m = ParentModule("Leaves", {{"a", ScaleModule("LA", 1.0)}, {"b", Block("LB", 2)}}, R"(
    def forward(self, x):
        return self.b.forward(self.a.forward(x))
  )");
  EXPECT_EQ(Names(Choose(m, 8)),
            (std::vector<std::string>{"a", "b.l0", "b.l1"}));  // as fine as it goes
  LoweredModel lowered = LowerModel(m);
  ModuleTree tree(lowered.graph);
  auto coarse = tree.Units(tree.Frontier(1));
  ASSERT_EQ(coarse.size(), 2u);
  // A cut required between b.l0 and b.l1 (e.g. --split-before b.l1) refines b even when balanced.
  auto fine = tree.Units(tree.Frontier(2));
  ASSERT_EQ(fine.size(), 3u);
  EXPECT_EQ(Names(ChooseUnits(tree, 1, {fine[2].begin})),
            (std::vector<std::string>{"a", "b.l0", "b.l1"}));
}

}  // namespace
}  // namespace gpipe
