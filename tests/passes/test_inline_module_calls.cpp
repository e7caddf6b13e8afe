#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "passes/inline_module_calls.h"
#include "passes/partition_units.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using testing::ParentModule;
using testing::ScaleModule;

// `layers` is only indexed (a ModuleList, ModuleDict or plain holder): never
// called, so it is not a call level of its own.
torch::jit::Module WithHolder() {
  torch::jit::Module holder(c10::QualifiedName("__torch__.Holder"));
  holder.register_attribute("training", c10::BoolType::get(), true);
  holder.register_module("a", ScaleModule("HoldA", 1.0));
  holder.register_module("b", ScaleModule("HoldB", 2.0));
  return ParentModule("Enc", {{"layers", holder}, {"head", ScaleModule("Head", 3.0)}}, R"(
    def forward(self, x):
        return self.head.forward(self.layers.b.forward(self.layers.a.forward(x)))
  )");
}

std::vector<std::string> Paths(const torch::jit::Graph& graph) {
  std::vector<std::string> paths;
  for (const torch::jit::Node* node : graph.nodes()) {
    if (node->kind() == c10::prim::Constant || node->kind() == c10::prim::GetAttr) continue;
    std::string path = ModulePathOf(node);
    if (paths.empty() || paths.back() != path) paths.push_back(path);
  }
  return paths;
}

TEST(InlineModuleCalls, RecordsTheWholePathOfAnIndexedContainer) {
  auto m = WithHolder();
  auto graph = m.get_method("forward").graph()->copy();
  EXPECT_TRUE(InlineModuleCalls(*graph));
  EXPECT_EQ(Paths(*graph), (std::vector<std::string>{"layers.a", "layers.b", "head"}));
  // torch::jit::Inline records only the last name: "a", "b".
  auto torch_graph = m.get_method("forward").graph()->copy();
  torch::jit::Inline(*torch_graph);
  EXPECT_EQ(Paths(*torch_graph), (std::vector<std::string>{"a", "b", "head"}));
}

TEST(InlineModuleCalls, NestedCallsKeepEveryLevel) {
  auto inner = ParentModule("Inner", {{"leaf", ScaleModule("Leaf", 1.0)}}, R"(
    def forward(self, x):
        return self.leaf.forward(x) + 1.0
  )");
  torch::jit::Module blocks(c10::QualifiedName("__torch__.Blocks"));
  blocks.register_attribute("training", c10::BoolType::get(), true);
  blocks.register_module("first", inner);
  auto outer = ParentModule("Outer", {{"blocks", blocks}}, R"(
    def forward(self, x):
        return self.blocks.first.forward(x)
  )");
  auto graph = outer.get_method("forward").graph()->copy();
  InlineModuleCalls(*graph);
  EXPECT_EQ(Paths(*graph), (std::vector<std::string>{"blocks.first.leaf", "blocks.first"}));
}

TEST(InlineModuleCalls, GraphWithoutCallsIsUnchanged) {
  auto graph = testing::ParseGraph(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  return (%a))IR");
  EXPECT_FALSE(InlineModuleCalls(*graph));
}

}  // namespace
}  // namespace gpipe
