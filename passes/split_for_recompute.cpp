#include "passes/split_for_recompute.h"

#include "passes/replayable_products.h"

namespace gpipe {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

std::vector<Node*> TopLevelNodes(Graph& graph) {
  std::vector<Node*> nodes;
  for (Node* node : graph.nodes()) nodes.push_back(node);
  return nodes;
}

// The graph's one returned tuple, extended by `extra`.
void ReturnAlso(Graph& graph, const std::vector<Value*>& extra) {
  Value* tuple = graph.outputs().at(0);
  TORCH_CHECK(graph.outputs().size() == 1 && tuple->node()->kind() == c10::prim::TupleConstruct,
              "SplitForRecompute: a stage graph returns one tuple");
  std::vector<Value*> elements(tuple->node()->inputs().begin(), tuple->node()->inputs().end());
  elements.insert(elements.end(), extra.begin(), extra.end());
  Node* wider = graph.createTuple(elements);
  wider->insertBefore(graph.return_node());
  graph.return_node()->replaceInput(0, wider->output());
  if (!tuple->hasUses()) tuple->node()->destroy();
}

}  // namespace

RecomputeGraphs SplitForRecompute(const std::shared_ptr<Graph>& graph, size_t num_activation_inputs,
                                  const std::vector<size_t>& saved_nodes) {
  TORCH_CHECK(num_activation_inputs <= graph->inputs().size());
  RecomputeGraphs result;
  {
    result.forward_saving = graph->copy();
    std::vector<Node*> nodes = TopLevelNodes(*result.forward_saving);
    std::vector<Value*> saved;
    for (size_t index : saved_nodes) {
      TORCH_CHECK(index < nodes.size(), "SplitForRecompute: no top-level node ", index);
      saved.push_back(nodes[index]->output());
      result.saved_kinds.push_back(nodes[index]->kind().toQualString());
    }
    ReturnAlso(*result.forward_saving, saved);
  }
  result.recompute = graph->copy();
  Graph& recompute = *result.recompute;
  std::vector<Node*> nodes = TopLevelNodes(recompute);
  for (size_t k = 0; k < saved_nodes.size(); ++k) {
    Node* original = nodes[saved_nodes[k]];
    Value* saved = recompute.insertInput(num_activation_inputs + k, "saved" + std::to_string(k))
                       ->setType(original->output()->type());
    std::vector<Value*> inputs{saved};
    inputs.insert(inputs.end(), original->inputs().begin(), original->inputs().end());
    std::optional<c10::Symbol> replay_op = ReplayOpOf(original);
    TORCH_CHECK(replay_op, "SplitForRecompute: cannot save the output of ",
                original->kind().toQualString());
    Node* replay = recompute.create(*replay_op, inputs, 1);
    replay->output()->setType(original->output()->type());
    replay->insertBefore(original);
    original->output()->replaceAllUsesWith(replay->output());
    original->destroy();
  }
  return result;
}

}  // namespace gpipe
