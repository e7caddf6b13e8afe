#include "passes/replayable_products.h"

#include <torch/csrc/jit/ir/alias_analysis.h>

namespace gpipe {

std::optional<c10::Symbol> ReplayOpOf(const torch::jit::Node* node) {
  if (node->outputs().size() != 1 || !node->output()->type()->isSubtypeOf(*c10::TensorType::get())) {
    return std::nullopt;
  }
  const c10::Symbol kind = node->kind();
  if (kind == c10::aten::linear) return c10::Symbol::fromQualString("gpipe::saved_linear");
  if (kind == c10::aten::conv1d || kind == c10::aten::conv2d || kind == c10::aten::conv3d) {
    // conv2d(input, weight, bias, stride, padding, dilation, groups)
    if (node->inputs().size() != 7 || !node->input(4)->type()->isSubtypeOf(*c10::ListType::ofInts())) {
      return std::nullopt;
    }
    return c10::Symbol::fromQualString("gpipe::saved_convolution");
  }
  if ((kind == c10::aten::matmul || kind == c10::aten::mm || kind == c10::aten::bmm) &&
      node->inputs().size() == 2) {
    return c10::Symbol::fromQualString("gpipe::saved_matmul");
  }
  return std::nullopt;
}

std::vector<size_t> ReplayableProducts(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<size_t> products;
  size_t index = 0;
  for (const torch::jit::Node* node : graph->nodes()) {
    if (ReplayOpOf(node)) products.push_back(index);
    ++index;
  }
  return products;
}

std::vector<size_t> SavableProducts(const std::shared_ptr<torch::jit::Graph>& graph) {
  const std::vector<size_t> products = ReplayableProducts(graph);
  if (products.empty()) return products;
  torch::jit::AliasDb aliases(graph);
  std::vector<const torch::jit::Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  std::vector<size_t> savable;
  for (size_t index : products) {
    if (!aliases.hasWriters(nodes[index]->output())) savable.push_back(index);
  }
  return savable;
}

}  // namespace gpipe
