#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "passes/specialize_arguments.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/jit.h>

namespace gpipe {
namespace {

using torch::jit::testing::FileCheck;

std::shared_ptr<torch::jit::Graph> GraphOf(const std::string& source) {
  auto cu = torch::jit::compile(source);
  return torch::jit::toGraphFunction(cu->get_function("f")).graph()->copy();
}

// timm's VisionTransformer: every block inside `if attn_mask is not None or is_causal`.
constexpr const char* kMaskedBlocks = R"(
def f(x, w, attn_mask: Optional[Tensor] = None, is_causal: bool = False, scale: float = 1.0):
    x = x * scale
    if attn_mask is not None or is_causal:
        x = torch.matmul(x, w)
        if attn_mask is not None:
            x = x + attn_mask
        x = torch.matmul(x, w)
    else:
        x = torch.matmul(x, w)
        x = torch.matmul(x, w)
    return torch.relu(x)
)";

TEST(SpecializeArguments, FindsTheArgumentsABranchAroundHeavyWorkDependsOn) {
  auto graph = GraphOf(kMaskedBlocks);
  // Inputs: x, w, attn_mask, is_causal, scale; all but x and w were omitted.
  EXPECT_EQ(FindBranchArguments(*graph, {2, 3, 4}), (std::vector<size_t>{2, 3}));
  EXPECT_EQ(FindBranchArguments(*graph, {4}), std::vector<size_t>{});  // data, not control
}

TEST(SpecializeArguments, TheBranchFoldsToTheDefaultsSide) {
  auto graph = GraphOf(kMaskedBlocks);
  SpecializeArguments(graph, {{2, c10::IValue()}, {3, false}});
  FileCheck()
      .check_not("prim::If")
      ->check_count("aten::matmul", 2, /*exactly=*/true)
      ->check_not("aten::add")
      ->run(*graph);
  EXPECT_EQ(graph->inputs().size(), 5u);  // the signature stays
  EXPECT_FALSE(graph->inputs()[2]->hasUses());
}

TEST(SpecializeArguments, NoChangeWithoutBranchesOrValues) {
  auto graph = GraphOf(R"(
def f(x, w, scale: float = 1.0):
    return torch.matmul(x, w) * scale
)");
  EXPECT_EQ(FindBranchArguments(*graph, {2}), std::vector<size_t>{});
  const std::string before = graph->toString();
  SpecializeArguments(graph, {});
  EXPECT_EQ(graph->toString(), before);
}

}  // namespace
}  // namespace gpipe
