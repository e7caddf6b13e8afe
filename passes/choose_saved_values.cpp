#include "passes/choose_saved_values.h"

#include <algorithm>

#include "passes/replayable_products.h"

namespace gpipe {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Follows view ops back from `v`; true if it reaches a weight input.
bool IsWeight(const Value* v, const std::vector<bool>& weight_inputs) {
  static const std::vector<c10::Symbol> kViews = {
      c10::aten::t,       c10::aten::transpose, c10::aten::view,       c10::aten::reshape,
      c10::aten::permute, c10::aten::expand,    c10::aten::contiguous, c10::aten::detach};
  while (true) {
    const Node* producer = v->node();
    if (producer->kind() == c10::prim::Param) {
      return v->offset() < weight_inputs.size() && weight_inputs[v->offset()];
    }
    if (producer->kind() == c10::prim::Constant) return v->type()->isSubtypeOf(*c10::TensorType::get());
    if (std::find(kViews.begin(), kViews.end(), producer->kind()) == kViews.end()) return false;
    v = producer->input(0);
  }
}

}  // namespace

std::vector<size_t> ChooseSelectiveSaves(const std::shared_ptr<torch::jit::Graph>& graph,
                                         const std::vector<bool>& weight_inputs) {
  TORCH_CHECK(weight_inputs.size() == graph->inputs().size(), "ChooseSelectiveSaves: ",
              weight_inputs.size(), " weight flags for ", graph->inputs().size(), " graph inputs");
  static const c10::Symbol kSavedMatmul = c10::Symbol::fromQualString("gpipe::saved_matmul");
  std::vector<const Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  std::vector<size_t> saved;
  for (size_t index : SavableProducts(graph)) {
    const Node* node = nodes[index];
    if (*ReplayOpOf(node) == kSavedMatmul && !IsWeight(node->input(0), weight_inputs) &&
        !IsWeight(node->input(1), weight_inputs)) {
      continue;  // activation x activation (attention): recomputed
    }
    saved.push_back(index);
  }
  return saved;
}

}  // namespace gpipe
