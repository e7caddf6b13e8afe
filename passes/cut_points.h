#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// Why a stage boundary cannot go before a top-level node: a value made
// before it and used after it has a type that cannot travel between stages.
struct CutBlocker {
  std::string value;  // its name in the graph ("features")
  std::string type;   // "Tensor[]"
};

// For every top-level node index i (as in graph->nodes(), constants
// included), whether a stage boundary may go before node i. A boundary
// carries every value defined before it and used after it; the runtime
// carries tensors (cut from autograd and handed back their gradients),
// Optional[Tensor], and immutable plain values (int, float, bool, str,
// None, device, lists of numbers, tuples of those). A list or dict of
// tensors cannot cross: the runtime would neither cut its tensors from the
// producer's autograd graph nor copy it before the consumer appends to it
// (DenseNet's `features` list, which every dense layer appends to). Index 0
// is always allowed. Pure analysis: the graph is unchanged.
std::vector<std::optional<CutBlocker>> FindCutBlockers(
    const std::shared_ptr<torch::jit::Graph>& graph);

// True if a value of this type can cross a stage boundary (see above).
bool CanCrossStages(const c10::TypePtr& type);

}  // namespace gpipe
