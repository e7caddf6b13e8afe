#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/ivalue.h>

#include "compiler/model_loader.h"
#include "passes/split_stages.h"

namespace gpipe {

// --activation-budget MiB: for each stage, the products its recompute plan
// keeps (passes/split_for_recompute.h) so that what the stage holds for one
// micro-batch between its forward and its backward fits the budget, while
// the product FLOPs recomputed in backward are as few as a greedy choice
// finds. What a stage holds per micro-batch in a plan: the tensors it hands
// on (its outputs, which a later stage reads) and the products it keeps; the
// cheap ops (pointwise, normalisation, softmax, dropout) are always
// recomputed, so the least a budget can be is the outputs alone, and the
// most it can use is the outputs and every savable product.

// One savable product of a stage, measured on the sample micro-batch.
struct ProductCost {
  size_t node = 0;      // top-level node index in the stage graph
  int64_t bytes = 0;    // its output
  double flops = 0;     // to recompute it (2 x multiply-adds)
  bool is_output = false;  // the stage hands it on anyway: keeping it is free
};

struct StageKeepCosts {
  std::vector<ProductCost> products;  // savable ones, in graph order
  int64_t output_bytes = 0;           // the tensors the stage hands on (distinct storages)
};

struct BudgetChoice {
  std::vector<size_t> saved_nodes;  // for SplitForRecompute, in graph order
  int64_t kept_bytes = 0;           // outputs + kept products, per micro-batch
  double recompute_flops = 0;       // products recomputed in backward
};

// Keeps the products that are outputs (free), then the others in decreasing
// FLOPs per byte while the total fits `budget_bytes`. Throws naming the
// stage and the least budget when its outputs alone do not fit.
//   products (bytes, flops): a (4, 40) b (8, 40) c (2, 4); outputs 10; budget 16
//   -> keeps a (10 per byte), then c (2 per byte; b no longer fits): 16 bytes, 40 FLOPs recomputed
BudgetChoice ChooseWithinBudget(const StageKeepCosts& costs, int64_t budget_bytes, size_t stage);

// Throws, naming the stage that must keep the most and how much, when the
// budget is below any stage's outputs: checked before any stage is planned.
void CheckBudgetCoversEveryStage(const std::vector<StageKeepCosts>& costs, int64_t budget_bytes);

// Runs the lowered model's graph once, without gradients and on copies of
// its buffers, on `micro_batch` (forward's arguments for one micro-batch),
// and measures for every stage of `split` its savable products' bytes and
// FLOPs and the bytes of the tensors it hands on.
std::vector<StageKeepCosts> MeasureKeepCosts(const LoweredModel& lowered, const StagePlan& plan,
                                             const SplitResult& split,
                                             const std::vector<c10::IValue>& micro_batch);

}  // namespace gpipe
