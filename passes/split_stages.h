#pragma once

#include <memory>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// Where a stage reads one of its inputs from (or where a model output lives).
struct ValueRef {
  enum class Origin { ModelInput, StageOutput };
  Origin origin = Origin::ModelInput;
  size_t stage = 0;  // producing stage, for StageOutput
  size_t index = 0;  // model input index, or output index of the producing stage
  bool operator==(const ValueRef& o) const {
    return origin == o.origin && stage == o.stage && index == o.index;
  }
};

// Contiguous ranges of top-level nodes: stage s owns the nodes
// [first_node[s], first_node[s+1]) (the last one up to the end of the graph).
struct StagePlan {
  std::vector<size_t> first_node;
  size_t num_stages() const { return first_node.size(); }
};

struct StageGraph {
  // Inputs: activation_inputs.size() values, then attribute_inputs.size()
  // values. Output: one tuple holding every value a later stage or the model
  // output needs from this stage.
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<ValueRef> activation_inputs;
  std::vector<size_t> attribute_inputs;  // index into the lifted attributes
};

struct SplitResult {
  std::vector<StageGraph> stages;
  std::vector<ValueRef> model_outputs;
};

// How a value reaches a stage more than one boundary after its producer.
enum class SkipRouting {
  Direct,       // producer -> consumer, one boundary (the default: nothing in between holds it)
  PassThrough,  // through every stage in between, as an input and an output of each
                // (as hand-written nn.Sequential pipelines do; kept as an ablation)
};

// Cuts `graph` into plan.num_stages() stage graphs. The graph's inputs are
// `num_model_inputs` model inputs followed by lifted attributes (see
// LiftAttributes). A value used by a later stage becomes an output of its
// producer and an input of each consumer only: it is routed directly, never
// passed through the stages in between. Constants are cloned into each stage
// that uses them. A tensor attribute read by several stages (tied weights) is
// owned by the first and routed to the others as a value, so gradients from
// every user reach the one tensor. Nodes with blocks are never cut (they are
// one top-level node). Does not modify `graph`.
SplitResult SplitStages(const std::shared_ptr<torch::jit::Graph>& graph, const StagePlan& plan,
                        size_t num_model_inputs, SkipRouting routing = SkipRouting::Direct);

}  // namespace gpipe
