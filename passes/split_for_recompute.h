#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// A stage graph rewritten for selective checkpointing: what the runtime runs
// in forward (no autograd graph kept, only the saved values) and in backward
// (the stage again, with autograd, reading the saved values instead of
// computing them).
struct RecomputeGraphs {
  // The stage's inputs; returns one tuple: the stage's outputs, then the saved values.
  std::shared_ptr<torch::jit::Graph> forward_saving;
  // Inputs: the stage's activation inputs, the saved values, the stage's
  // other inputs (attributes); returns the stage's output tuple.
  std::shared_ptr<torch::jit::Graph> recompute;
  std::vector<std::string> saved_kinds;  // the producing op of each saved value, in order
};

// Each saved node `%y = aten::linear(%x, %w, %b)` becomes, in `recompute`,
// `%y = gpipe::saved_linear(%y_saved, %x, %w, %b)`: an op of the runtime
// (runtime/saved_ops.cpp) that returns the saved value and, in backward,
// computes the gradients of %x, %w and %b from them as the original op's
// backward would, so the product itself is not computed again. Likewise
// aten::conv1d/2d/3d -> gpipe::saved_convolution and aten::matmul/mm/bmm ->
// gpipe::saved_matmul. Everything else is recomputed as it was, random ops
// in the same order (the runtime replays the generator state).
//
//   before (stage, nodes 1 and 3 saved)    forward_saving           recompute
//   graph(%x, %w1, %w2):                  graph(%x, %w1, %w2):     graph(%x, %s1, %s3, %w1, %w2):
//     %0 = aten::layer_norm(%x)             ... as before ...        %0 = aten::layer_norm(%x)
//     %1 = aten::linear(%0, %w1)                                     %1 = gpipe::saved_linear(%s1, %0, %w1)
//     %2 = aten::gelu(%1)                                            %2 = aten::gelu(%1)
//     %3 = aten::linear(%2, %w2)                                     %3 = gpipe::saved_linear(%s3, %2, %w2)
//     %t = prim::TupleConstruct(%3)       %t = (%3, %1, %3)          %t = prim::TupleConstruct(%3)
//     return (%t)                         return (%t)               return (%t)
//
// `saved_nodes` are top-level node indices from ChooseSelectiveSaves (or the
// budget policy); `num_activation_inputs` leading graph inputs come before
// the attributes. An empty `saved_nodes` makes a plain recompute (as
// `always`). Does not modify `graph`.
RecomputeGraphs SplitForRecompute(const std::shared_ptr<torch::jit::Graph>& graph,
                                  size_t num_activation_inputs,
                                  const std::vector<size_t>& saved_nodes);

}  // namespace gpipe
