#pragma once

#include <string>

namespace gpipe {

// Which (stage, micro-batch) tasks drop their activations in forward and
// recompute them in backward (torchgpipe's `checkpoint` argument).
enum class CheckpointMode {
  Never,       // keep every activation: fastest, most memory
  ExceptLast,  // recompute all but the last micro-batch, whose backward starts right away
  Always,      // recompute everything: least memory
  Selective,   // every micro-batch keeps only its products with a weight and
               // recomputes the rest (gpipe-compile's recompute plan per stage)
  Budget,      // as Selective, with the products gpipe-compile --activation-budget
               // chose to fit each stage's per-micro-batch budget
};

CheckpointMode ParseCheckpointMode(const std::string& text);  // throws naming the valid values
std::string ToString(CheckpointMode mode);

// True if micro-batch `micro_batch` of `num_micro_batches` is recomputed.
bool IsCheckpointed(CheckpointMode mode, size_t micro_batch, size_t num_micro_batches);

// True for the modes that run each stage's recompute plan (its saving forward
// and recompute methods) rather than recomputing the whole stage.
bool RunsRecomputePlan(CheckpointMode mode);

}  // namespace gpipe
