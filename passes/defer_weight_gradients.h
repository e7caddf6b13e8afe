#pragma once

#include <cstddef>
#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// Lets the runtime compute each linear layer's weight gradient for many
// micro-batches in one product (runtime/deferred_weight_grads.h).
//
// Before:
//   %y : Tensor = aten::linear(%x, %w, %b)
// After:
//   %y : Tensor = gpipe::linear(%x, %w, %b)
//
// gpipe::linear returns what aten::linear returns (it calls it). Outside a
// training task of the runtime it is aten::linear, backward included; in
// one, its backward computes the input's gradient at once and hands the
// input and the output's gradient to the stage's DeferredWeightGrads, which
// later computes dW = [dY_0; dY_1; ...]^T [X_0; X_1; ...] over the
// micro-batches in order: one product with M times the rows instead of M
// small products and M accumulations into .grad. Ops in nested blocks are
// rewritten too. Returns how many ops it rewrote. Running the graph needs
// the runtime's registration of gpipe::linear, rewriting it does not.
size_t DeferLinearWeightGradients(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace gpipe
