#pragma once

#include <memory>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "passes/lift_attributes.h"

namespace gpipe {

// One batch norm whose running statistics DeferBatchNorm took over. Indices
// are into the lifted attribute list.
struct DeferredBatchNorm {
  size_t running_mean = 0;
  size_t running_var = 0;
  size_t sum = 0;          // float64 [C]: sum of the inputs over all but dim 1
  size_t sum_squares = 0;  // float64 [C]
  size_t count = 0;        // float64 [1]: elements per channel seen
  size_t calls = 0;        // float64 [1]: micro-batches seen
  int64_t num_batches_tracked = -1;  // attribute index, or -1 if the module has none
  double momentum = 0.1;
};

// Rewrites every aten::batch_norm whose running statistics are lifted
// buffers so that, in training, it normalises with the micro-batch's
// statistics (as before) but leaves the running statistics alone and instead
// accumulates sums into four new buffers, appended to `attributes` (and as
// graph inputs). A per-stage commit (see compiler/stage_module.cpp) then
// updates the running statistics once per mini-batch from the whole batch,
// as the unpipelined model would. In eval mode the node behaves as before.
// Returns the rewritten batch norms; an empty vector means the graph is
// unchanged.
std::vector<DeferredBatchNorm> DeferBatchNorm(std::shared_ptr<torch::jit::Graph>& graph,
                                              std::vector<LiftedAttribute>& attributes,
                                              size_t num_model_inputs);

}  // namespace gpipe
