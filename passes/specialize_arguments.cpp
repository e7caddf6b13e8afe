#include "passes/specialize_arguments.h"

#include <unordered_set>

#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "passes/partition_units.h"

namespace gpipe {
namespace {

constexpr double kHeavyOpWeight = 10;  // OpWeight of a matrix product or a convolution

bool DoesHeavyWork(const torch::jit::Block* block) {
  for (const torch::jit::Node* node : block->nodes()) {
    if (OpWeight(node) >= kHeavyOpWeight) return true;
    for (const torch::jit::Block* inner : node->blocks()) {
      if (DoesHeavyWork(inner)) return true;
    }
  }
  return false;
}

bool ReadsAny(const torch::jit::Node* node,
              const std::unordered_set<const torch::jit::Value*>& values) {
  for (const torch::jit::Value* input : node->inputs()) {
    if (values.count(input)) return true;
  }
  for (const torch::jit::Block* block : node->blocks()) {  // e.g. `mask is not None or is_causal`
    for (const torch::jit::Node* inner : block->nodes()) {
      if (ReadsAny(inner, values)) return true;
    }
    for (const torch::jit::Value* output : block->outputs()) {
      if (values.count(output)) return true;
    }
  }
  return false;
}

// Whether a top-level branch around heavy work depends on `input`.
bool BranchesOn(const torch::jit::Graph& graph, const torch::jit::Value* input) {
  std::unordered_set<const torch::jit::Value*> derived{input};
  for (const torch::jit::Node* node : graph.nodes()) {
    if (!ReadsAny(node, derived)) continue;
    if (node->kind() == c10::prim::If && derived.count(node->input(0)) &&
        (DoesHeavyWork(node->blocks()[0]) || DoesHeavyWork(node->blocks()[1]))) {
      return true;
    }
    // Only what is computed from the argument on the way to a condition:
    // values of heavy work are data, not control.
    if (OpWeight(node) >= kHeavyOpWeight) continue;
    for (const torch::jit::Value* output : node->outputs()) derived.insert(output);
  }
  return false;
}

}  // namespace

std::vector<size_t> FindBranchArguments(const torch::jit::Graph& graph,
                                        const std::vector<size_t>& candidates) {
  std::vector<size_t> found;
  for (size_t k : candidates) {
    if (k < graph.inputs().size() && BranchesOn(graph, graph.inputs()[k])) found.push_back(k);
  }
  return found;
}

void SpecializeArguments(std::shared_ptr<torch::jit::Graph>& graph,
                         const std::vector<std::pair<size_t, c10::IValue>>& values) {
  if (values.empty()) return;
  torch::jit::WithInsertPoint guard(graph->param_node()->next());
  for (const auto& [k, value] : values) {
    torch::jit::Value* input = graph->inputs().at(k);
    torch::jit::Value* constant = graph->insertConstant(value);
    // A None constant is typed NoneType; uses typed Optional[T] accept it.
    input->replaceAllUsesWith(constant);
  }
  torch::jit::ConstantPropagation(graph);
  torch::jit::EliminateDeadCode(graph);
}

}  // namespace gpipe
