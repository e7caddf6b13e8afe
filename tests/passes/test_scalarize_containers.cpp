#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "passes/cut_points.h"
#include "passes/scalarize_containers.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/jit.h>
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using torch::jit::testing::FileCheck;
auto Parse = testing::ParseGraph;

// DenseNet's block: every layer reads the list and appends to it.
constexpr const char* kDenseBlock = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %l : Tensor[] = prim::ListConstruct(%x)
  %c1 : Tensor = aten::cat(%l, %one)
  %y1 : Tensor = aten::relu(%c1)
  %n1 : Tensor[] = aten::append(%l, %y1)
  %c2 : Tensor = aten::cat(%l, %one)
  %y2 : Tensor = aten::relu(%c2)
  %n2 : Tensor[] = aten::append(%l, %y2)
  %out : Tensor = aten::cat(%l, %one)
  return (%out))IR";

TEST(ScalarizeContainers, ListAppendedInStraightLineCodeBecomesItsElements) {
  auto graph = Parse(kDenseBlock);
  EXPECT_TRUE(ScalarizeContainers(graph));
  FileCheck().check_not("aten::append")->run(*graph);
  // Each cat reads a fresh list of the features so far: 1, 2, then 3.
  std::vector<size_t> widths;
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::aten::cat) widths.push_back(node->input(0)->node()->inputs().size());
  }
  EXPECT_EQ(widths, (std::vector<size_t>{1, 2, 3}));
  // No list lives across the layers any more: a boundary may go anywhere but
  // between a fresh list and the cat reading it.
  auto blockers = FindCutBlockers(graph);
  std::vector<torch::jit::Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  for (size_t i = 1; i < nodes.size(); ++i) {
    EXPECT_EQ(blockers[i].has_value(), nodes[i - 1]->kind() == c10::prim::ListConstruct)
        << i << *graph;
  }
}

TEST(ScalarizeContainers, DictFilledAndReadWithConstantKeys) {
  // A segmentation model's result dict, returned in a tuple (the IR parser
  // of LibTorch 1.13 cannot read Dict types, so the graph comes from source).
  auto cu = torch::jit::compile(R"(
def f(x):
    d: Dict[str, Tensor] = {}
    d["out"] = torch.relu(x)
    d["aux"] = torch.tanh(x)
    s = torch.sigmoid(d["out"])
    return s, d
)");
  auto graph = torch::jit::toGraphFunction(cu->get_function("f")).graph()->copy();
  EXPECT_TRUE(ScalarizeContainers(graph));
  FileCheck().check_not("aten::_set_item")->check_not("aten::__getitem__")->run(*graph);
  torch::jit::Node* tuple = graph->outputs()[0]->node();
  ASSERT_EQ(tuple->kind(), c10::prim::TupleConstruct);
  EXPECT_EQ(tuple->input(0)->node()->input(0)->node()->kind(),
            c10::aten::relu);  // sigmoid(relu(x))
  torch::jit::Node* dict = tuple->input(1)->node();
  ASSERT_EQ(dict->kind(), c10::prim::DictConstruct);
  EXPECT_EQ(dict->input(1)->node()->kind(), c10::aten::relu);
  EXPECT_EQ(dict->input(3)->node()->kind(), c10::aten::tanh);
}

TEST(ScalarizeContainers, BlockersNameTheListThatCannotCross) {
  auto graph = Parse(kDenseBlock);
  auto blockers = FindCutBlockers(graph);
  ASSERT_EQ(blockers.size(), 9u);
  EXPECT_FALSE(blockers[1].has_value());  // before the list is made
  for (size_t i = 2; i < 9; ++i) {        // from the list's making to its last use
    ASSERT_TRUE(blockers[i].has_value()) << i;
    EXPECT_EQ(blockers[i]->type, "List[Tensor]");
  }
}

TEST(ScalarizeContainers, ListUsedInABranchOrByAnUnknownOpIsLeftAlone) {
  auto branch = Parse(R"IR(
graph(%x : Tensor, %c : bool):
  %one : int = prim::Constant[value=1]()
  %l : Tensor[] = prim::ListConstruct(%x)
  %y : Tensor = aten::relu(%x)
  %r : int = prim::If(%c)
    block0():
      %n : Tensor[] = aten::append(%l, %y)
      -> (%one)
    block1():
      -> (%one)
  %out : Tensor = aten::cat(%l, %one)
  return (%out))IR");
  EXPECT_FALSE(ScalarizeContainers(branch));
  auto unknown = Parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %l : Tensor[] = prim::ListConstruct(%x)
  %n : Tensor[] = aten::append(%l, %x)
  %z : Tensor = a::mystery(%l)
  return (%z))IR");
  EXPECT_FALSE(ScalarizeContainers(unknown));
  FileCheck().check("aten::append")->check("a::mystery(%")->run(*unknown);
}

}  // namespace
}  // namespace gpipe
