#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// The products a checkpointed stage can keep instead of recomputing: ops
// whose saved output the runtime replays with the op's own backward
// (runtime/saved_ops.h). One table serves the selective and budget policies
// (choose_saved_values.h, compiler/activation_budget.h) and the rewrite
// (split_for_recompute.h):
//   aten::linear                                  -> gpipe::saved_linear
//   aten::conv1d/2d/3d (integer-list padding)     -> gpipe::saved_convolution
//   aten::matmul, aten::mm, aten::bmm             -> gpipe::saved_matmul
// padding="same" takes a string, which the replay does not; a node with
// several outputs or a non-tensor output is never a product here.
std::optional<c10::Symbol> ReplayOpOf(const torch::jit::Node* node);

// Top-level node indices (in graph->nodes() order, constants counted) of
// every node ReplayOpOf knows, in order.
std::vector<size_t> ReplayableProducts(const std::shared_ptr<torch::jit::Graph>& graph);

// The subset a stage may keep: a product whose output is written in place
// later (AliasDb) is recomputed, since a replay would apply the write twice.
std::vector<size_t> SavableProducts(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace gpipe
