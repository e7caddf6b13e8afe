#pragma once

#include <string>

namespace gpipe {

// Which (stage, micro-batch) tasks drop their activations in forward and
// recompute them in backward (torchgpipe's `checkpoint` argument).
enum class CheckpointMode {
  Never,       // keep every activation: fastest, most memory
  ExceptLast,  // recompute all but the micro-batch whose backward runs first (see IsCheckpointed)
  Always,      // recompute everything: least memory
  Selective,   // every micro-batch keeps only its products with a weight and
               // recomputes the rest (gpipe-compile's recompute plan per stage)
  Budget,      // as Selective, with the products gpipe-compile --activation-budget
               // chose to fit each stage's per-micro-batch budget
};

CheckpointMode ParseCheckpointMode(const std::string& text);  // throws naming the valid values
std::string ToString(CheckpointMode mode);

// True if micro-batch `micro_batch` is recomputed. except_last spares
// micro-batch 0: every schedule runs a stage's backwards in micro-batch order
// (gpipe's as PyTorch's ScheduleGPipe), so micro-batch 0's backward comes
// first and uses the activations it kept, and no recompute ever runs beside a
// whole micro-batch kept (sparing another would, at that first backward).
// The name is torchgpipe's: its backwards run last micro-batch first, so
// there the one spared is the last.
bool IsCheckpointed(CheckpointMode mode, size_t micro_batch);

// True for the modes that run each stage's recompute plan (its saving forward
// and recompute methods) rather than recomputing the whole stage.
bool RunsRecomputePlan(CheckpointMode mode);

}  // namespace gpipe
