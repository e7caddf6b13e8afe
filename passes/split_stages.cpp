// SplitStages: cut a lifted, inlined forward graph into stage graphs.
//
// Every top-level node belongs to exactly one stage (StagePlan ranges). Each
// stage graph is built by cloning its nodes; whenever a cloned node (or a node
// nested in its blocks) reads a value defined outside the stage, the value is
// resolved:
//   - a constant             -> cloned into this stage;
//   - a model input          -> a stage input ValueRef{ModelInput, k};
//   - a lifted attribute     -> a stage attribute input, owned by the first
//                               stage that reads it; a later stage reading
//                               it too (tied weights) receives it from the
//                               owner as a StageOutput, so there is one tensor
//                               and every user's gradient flows back to it;
//   - a value of stage a < s -> an output of stage a and an input of stage s,
//                               ValueRef{StageOutput, a, k}.
// Because consumers name the producing stage directly, a value that skips
// stages ("portal") crosses exactly one boundary, whatever lies between.
// SkipRouting::PassThrough instead relays it: stage s resolves it from stage
// s-1, which resolves it from s-2, ..., so every stage between holds it.
//
//   graph(%x, %w0, %w1):           plan {0, 1}      stage 0: graph(%x, %w0):
//     %a = a::aaa(%x, %w0)         ------------>      %a = a::aaa(%x, %w0)
//     %b = a::bbb(%a, %x, %w1)                        return ((%a))
//     return (%b)                                   stage 1: graph(%a, %x, %w1):
//                                                     %b = a::bbb(%a, %x, %w1)
//                                                     return ((%b))

#include "passes/split_stages.h"

#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/jit/jit_log.h>

namespace gpipe {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

class StageSplitter {
 public:
  StageSplitter(const std::shared_ptr<Graph>& graph, const StagePlan& plan, size_t num_model_inputs,
                SkipRouting routing)
      : graph_(graph), plan_(plan), num_model_inputs_(num_model_inputs), routing_(routing) {
    // Non-tensor attributes (the training flag) are plain values: each stage reads its own.
    for (size_t k = num_model_inputs_; k < graph_->inputs().size(); ++k) {
      Value* v = graph_->inputs()[k];
      if (!v->type()->cast<c10::TensorType>()) shareable_.insert(v);
    }
  }

  SplitResult Run() {
    std::vector<Node*> nodes(graph_->nodes().begin(), graph_->nodes().end());
    CheckPlan(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i]->kind() != c10::prim::Constant) stage_of_node_[nodes[i]] = StageOfIndex(i);
    }
    FindAttributeOwners(nodes);
    stages_.resize(plan_.num_stages());
    for (size_t s = 0; s < stages_.size(); ++s) {
      stages_[s].graph = std::make_shared<Graph>();
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i]->kind() == c10::prim::Constant) continue;
      CloneInto(StageOfIndex(i), nodes[i]);
    }
    SplitResult result;
    for (Value* out : graph_->outputs()) result.model_outputs.push_back(Export(out));
    for (size_t s = 0; s < stages_.size(); ++s) {
      auto& stage = stages_[s];
      std::vector<Value*> outs;
      for (Value* v : stage.exported) outs.push_back(stage.local.at(v));
      Node* tuple = stage.graph->insertNode(stage.graph->createTuple(outs));
      stage.graph->registerOutput(tuple->output());
      GRAPH_DUMP("stage " + std::to_string(s) + ":", stage.graph);
      result.stages.push_back(
          {stage.graph, std::move(stage.activation_inputs), std::move(stage.attribute_inputs)});
    }
    return result;
  }

 private:
  struct Stage {
    std::shared_ptr<Graph> graph;
    std::unordered_map<Value*, Value*> local;  // original value -> this stage's value
    std::vector<ValueRef> activation_inputs;
    std::vector<size_t> attribute_inputs;
    std::vector<Value*> exported;          // original values this stage outputs
  };

  void CheckPlan(size_t node_count) const {
    TORCH_CHECK(plan_.num_stages() >= 1, "a stage plan needs at least one stage");
    TORCH_CHECK(plan_.first_node[0] == 0, "the first stage must start at node 0");
    for (size_t s = 1; s < plan_.num_stages(); ++s) {
      TORCH_CHECK(plan_.first_node[s] > plan_.first_node[s - 1] && plan_.first_node[s] < node_count,
                  "stage ", s, " starts at node ", plan_.first_node[s],
                  ", which is not after stage ", s - 1, " and inside the graph (", node_count,
                  " nodes); every stage needs at least one node");
    }
  }

  size_t StageOfIndex(size_t node_index) const {
    size_t s = 0;
    while (s + 1 < plan_.num_stages() && plan_.first_node[s + 1] <= node_index) ++s;
    return s;
  }

  // Clones a top-level node into stage s, resolving every outside value it uses.
  void CloneInto(size_t s, Node* node) {
    Stage& stage = stages_[s];
    torch::jit::WithInsertPoint guard(stage.graph->block());
    Node* clone = stage.graph->createClone(node, [&](Value* v) { return Resolve(s, v); });
    stage.graph->insertNode(clone);
    for (size_t k = 0; k < node->outputs().size(); ++k) {
      stage.local[node->outputs()[k]] = clone->outputs()[k];
    }
  }

  Value* Resolve(size_t s, Value* v) {
    Stage& stage = stages_[s];
    auto known = stage.local.find(v);
    if (known != stage.local.end()) return known->second;
    Value* local = nullptr;
    Node* producer = v->node();
    if (producer->kind() == c10::prim::Constant) {
      Node* constant = stage.graph->createClone(producer, [](Value*) -> Value* {
        TORCH_INTERNAL_ASSERT(false, "constants have no inputs");
      });
      stage.graph->prependNode(constant);
      local = constant->output();
    } else if (producer == graph_->param_node() && v->offset() >= num_model_inputs_ &&
               (!IsShared(v) || attribute_owner_.at(v) == s)) {
      local = stage.graph->addInput()->copyMetadata(v);  // attributes go last
      stage.attribute_inputs.push_back(v->offset() - num_model_inputs_);
    } else {
      bool model_input = producer == graph_->param_node() && v->offset() < num_model_inputs_;
      ValueRef ref = model_input ? ValueRef{ValueRef::Origin::ModelInput, 0, v->offset()} : Export(v);
      if (!model_input && routing_ == SkipRouting::PassThrough && ref.stage + 1 < s) {
        Resolve(s - 1, v);  // the stage before holds it (relayed the same way) ...
        ref = ExportFrom(s - 1, v);  // ... and hands it on
      }
      local = stage.graph->insertInput(stage.activation_inputs.size())->copyMetadata(v);
      stage.activation_inputs.push_back(ref);
    }
    stage.local[v] = local;
    return local;
  }

  // Which stages read each attribute input (blocks count for their top-level
  // node). An attribute read by several stages belongs to the first; the
  // others receive it from there like an activation, so that there is one
  // tensor, and gradients from every user flow back to it.
  void FindAttributeOwners(const std::vector<Node*>& nodes) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      size_t s = StageOfIndex(i);
      std::function<void(Node*)> visit = [&](Node* n) {
        for (Value* in : n->inputs()) {
          if (in->node() != graph_->param_node() || in->offset() < num_model_inputs_) continue;
          attribute_owner_.emplace(in, s);  // first (lowest) stage wins
          attribute_users_[in].insert(s);
        }
        for (torch::jit::Block* b : n->blocks()) {
          for (Node* inner : b->nodes()) visit(inner);
          visit(b->return_node());
        }
      };
      visit(nodes[i]);
    }
  }

  bool IsShared(Value* v) const {
    auto it = attribute_users_.find(v);
    return it != attribute_users_.end() && it->second.size() > 1 && !shareable_.count(v);
  }

  // Makes v an output of the stage that defines it and returns where it lives.
  ValueRef Export(Value* v) {
    Node* producer = v->node();
    if (producer == graph_->param_node() && v->offset() >= num_model_inputs_) {
      return ExportFrom(attribute_owner_.at(v), v);  // a shared attribute
    }
    if (producer == graph_->param_node()) {
      TORCH_CHECK(v->offset() < num_model_inputs_,
                  "the model returns one of its parameters or buffers ('", v->debugName(),
                  "') directly; return a computed value instead");
      return {ValueRef::Origin::ModelInput, 0, v->offset()};
    }
    TORCH_CHECK(producer->kind() != c10::prim::Constant,
                "the model returns a constant (", v->debugName(),
                "); pipelined models must return computed values");
    // A value defined inside a block never escapes it, so its top-level
    // owner is the producer itself here.
    return ExportFrom(stage_of_node_.at(producer), v);
  }

  ValueRef ExportFrom(size_t owner, Value* v) {
    Stage& stage = stages_[owner];
    for (size_t k = 0; k < stage.exported.size(); ++k) {
      if (stage.exported[k] == v) return {ValueRef::Origin::StageOutput, owner, k};
    }
    stage.exported.push_back(v);
    return {ValueRef::Origin::StageOutput, owner, stage.exported.size() - 1};
  }

  const std::shared_ptr<Graph>& graph_;
  const StagePlan& plan_;
  size_t num_model_inputs_;
  SkipRouting routing_;
  std::unordered_map<Node*, size_t> stage_of_node_;
  std::unordered_map<Value*, size_t> attribute_owner_;
  std::unordered_map<Value*, std::set<size_t>> attribute_users_;
  std::unordered_set<Value*> shareable_;  // attributes every stage keeps a copy of
  std::vector<Stage> stages_;
};

}  // namespace

SplitResult SplitStages(const std::shared_ptr<torch::jit::Graph>& graph, const StagePlan& plan,
                        size_t num_model_inputs, SkipRouting routing) {
  TORCH_CHECK(num_model_inputs <= graph->inputs().size(), "SplitStages: ", num_model_inputs,
              " model inputs but the graph has only ", graph->inputs().size(), " inputs");
  return StageSplitter(graph, plan, num_model_inputs, routing).Run();
}

}  // namespace gpipe
