#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace gpipe {

// The losses gpipe-run --loss names, over the model's first floating-point
// output and the data's targets, averaged over the mini-batch as PyTorch's
// functional losses do (over examples, or tokens for a language model):
//   cross_entropy    logits [B, C] against classes [B], or LM logits [B, L, V]
//                    against tokens [B, L]; targets equal to ignore_index count for nothing
//   nll              the same over log-probabilities
//   mse              any shape against targets of that shape
//   bce_with_logits  logits against 0/1 targets of the same shape
//   model            the model computes its loss: its first 0-dim floating output
//   sum              the output's sum, with no targets (benchmarks on random data)
struct LossOptions {
  std::string kind = "mse";
  int64_t ignore_index = -100;
};

// Parses and checks a --loss name; the error lists the names.
LossOptions ParseLoss(const std::string& kind, int64_t ignore_index = -100);

bool LossNeedsTargets(const LossOptions& loss);

// The output the loss reads: the model's own loss for `model`, else the first floating tensor.
at::Tensor LossInput(const LossOptions& loss, const std::vector<at::Tensor>& outputs);

// The mean loss of the mini-batch. A target of the wrong shape or dtype is
// one line naming both shapes and the fix.
at::Tensor ComputeLoss(const LossOptions& loss, const at::Tensor& output,
                       const at::Tensor& targets);

// The mini-batch's loss as a sum of per-micro-batch shares, for
// Pipeline::train_step's MicroBatchLossFunction: a share is the micro-batch's
// summed loss divided by the whole mini-batch's count (its examples, its
// elements for mse and bce_with_logits, its counted tokens for a language
// model with ignored targets), so the shares add up to ComputeLoss over the
// whole mini-batch, and so do their gradients, however unevenly the ignored
// tokens fall. A model's own loss (a mean over its micro-batch) is weighted
// by the micro-batch's rows.
class LossShares {
 public:
  LossShares(LossOptions loss, at::Tensor targets);
  at::Tensor Share(const at::Tensor& output, int64_t offset, int64_t rows, int64_t batch) const;

 private:
  LossOptions loss_;
  at::Tensor targets_;
  double count_ = 0;  // the whole mini-batch's denominator
};

// What an evaluation reports besides the loss: classification top-1
// accuracy (cross_entropy/nll with class targets), or a language model's
// perplexity (cross_entropy/nll over tokens). Sums, to add up over batches.
struct EvalTotals {
  double loss_sum = 0;     // loss x examples (or tokens)
  double weight = 0;       // examples (or counted tokens)
  int64_t correct = 0;     // classification: right top-1 predictions
  int64_t classified = 0;  // classification: examples
  bool language_model = false;
};
void AccumulateEval(const LossOptions& loss, const at::Tensor& output, const at::Tensor& targets,
                    EvalTotals& totals);

}  // namespace gpipe
