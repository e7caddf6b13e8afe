#include "passes/choose_saved_values.h"

#include <torch/csrc/jit/ir/alias_analysis.h>

namespace gpipe {
namespace {

using torch::jit::Node;
using torch::jit::Value;

bool IsConvolution(const Node* node) {
  if (node->kind() != c10::aten::conv1d && node->kind() != c10::aten::conv2d &&
      node->kind() != c10::aten::conv3d) {
    return false;
  }
  // conv2d(input, weight, bias, stride, padding, dilation, groups): the
  // padding="same" overload takes a string, which the replay does not.
  return node->inputs().size() == 7 &&
         node->input(4)->type()->isSubtypeOf(*c10::ListType::ofInts());
}

bool IsMatrixProduct(const Node* node) {
  return node->kind() == c10::aten::matmul || node->kind() == c10::aten::mm ||
         node->kind() == c10::aten::bmm;
}

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

bool IsReplayableProduct(const Node* node) {
  if (node->outputs().size() != 1 || !node->output()->type()->isSubtypeOf(*c10::TensorType::get())) {
    return false;
  }
  return node->kind() == c10::aten::linear || IsConvolution(node) ||
         (IsMatrixProduct(node) && node->inputs().size() == 2);
}

std::vector<size_t> ChooseSelectiveSaves(const std::shared_ptr<torch::jit::Graph>& graph,
                                         const std::vector<bool>& weight_inputs) {
  TORCH_CHECK(weight_inputs.size() == graph->inputs().size(), "ChooseSelectiveSaves: ",
              weight_inputs.size(), " weight flags for ", graph->inputs().size(), " graph inputs");
  torch::jit::AliasDb aliases(graph);
  std::vector<size_t> saved;
  size_t index = 0;
  for (const Node* node : graph->nodes()) {
    const size_t here = index++;
    if (!IsReplayableProduct(node) || aliases.hasWriters(node->output())) continue;
    if (IsMatrixProduct(node) && !IsWeight(node->input(0), weight_inputs) &&
        !IsWeight(node->input(1), weight_inputs)) {
      continue;  // activation x activation (attention): recomputed
    }
    saved.push_back(here);
  }
  return saved;
}

}  // namespace gpipe
