#include "passes/defer_weight_gradients.h"

#include <vector>

#include <torch/csrc/jit/ir/ir_views.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

namespace gpipe {
namespace {

void CollectLinears(torch::jit::Block* block, std::vector<torch::jit::Node*>& linears) {
  for (torch::jit::Node* node : block->nodes()) {
    if (node->kind() == c10::aten::linear) linears.push_back(node);
    for (torch::jit::Block* inner : node->blocks()) CollectLinears(inner, linears);
  }
}

}  // namespace

size_t DeferLinearWeightGradients(const std::shared_ptr<torch::jit::Graph>& graph) {
  static const c10::Symbol kLinear = c10::Symbol::fromQualString("gpipe::linear");
  std::vector<torch::jit::Node*> linears;
  CollectLinears(graph->block(), linears);
  for (torch::jit::Node* node : linears) {
    torch::jit::Node* replacement = graph->create(kLinear, node->inputs(), 1);
    replacement->output()->copyMetadata(node->output());  // type and name
    replacement->insertBefore(node);
    node->output()->replaceAllUsesWith(replacement->output());
    node->destroy();
  }
  return linears.size();
}

}  // namespace gpipe
