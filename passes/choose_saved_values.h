#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// The selective checkpointing policy (Korthikanti et al., 2022, as in
// Megatron-LM): a checkpointed stage keeps the outputs of its products with
// a weight, which are expensive to recompute, and recomputes everything
// else in backward — normalisation, pointwise ops, softmax, dropout and the
// attention core, whose activation × activation products make the large
// [heads, T, T] tensors and cost little next to the projections.
//
// Returns the indices (in graph->nodes() order, top level only) of the
// nodes whose single output the stage saves, among SavableProducts
// (replayable_products.h):
//   aten::linear, aten::conv1d/2d/3d          always;
//   aten::matmul, aten::mm, aten::bmm         when one operand is a
//        weight: a graph input marked in `weight_inputs` (parameters, and tied
//        weights routed from another stage), through view ops (t, transpose,
//        view, reshape, permute, expand, contiguous).
// Nodes inside blocks are recomputed with their block. `weight_inputs` has
// one entry per graph input.
//
//   graph(%x, %w1, %w2):                      saved: nodes 1 and 3
//     %0 = aten::layer_norm(%x, ...)          (recomputed)
//     %1 = aten::linear(%0, %w1, %none)       (saved)
//     %2 = aten::gelu(%1, ...)                (recomputed)
//     %3 = aten::linear(%2, %w2, %none)       (saved)
std::vector<size_t> ChooseSelectiveSaves(const std::shared_ptr<torch::jit::Graph>& graph,
                                         const std::vector<bool>& weight_inputs);

}  // namespace gpipe
