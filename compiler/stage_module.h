#pragma once

#include <vector>

#include <torch/script.h>

#include "passes/defer_batch_norm.h"
#include "passes/lift_attributes.h"
#include "passes/split_for_recompute.h"
#include "passes/split_stages.h"
#include "runtime/manifest.h"

namespace gpipe {

struct BuiltStage {
  torch::jit::Module module;
  std::vector<ParameterEntry> parameters;
  bool uses_rng = false;
  std::vector<int64_t> mutated_inputs;  // forward arguments the stage writes to in place
};

// Wraps a stage graph in a saveable TorchScript module that owns exactly the
// stage's attributes: each attribute input becomes a parameter or buffer of
// the module (an identifier name; the original dotted name goes to the
// manifest), the training flag becomes the module's own `training`, and the
// remaining inputs are forward's arguments.
//
// If the stage holds batch norms rewritten by DeferBatchNorm, the module also
// gets `gpipe_commit_batch_norm(self)`, which the runtime calls once per
// training forward to fold the accumulated whole-batch statistics into the
// running statistics (kCommitBatchNormMethod).
//
// With `recompute`, the module also gets the two methods of selective
// checkpointing the runtime runs (kForwardSavingMethod, kRecomputeMethod).
BuiltStage BuildStageModule(const StageGraph& stage, const std::vector<LiftedAttribute>& attributes,
                            size_t stage_index, const std::vector<DeferredBatchNorm>& deferred = {},
                            const RecomputeGraphs* recompute = nullptr);

}  // namespace gpipe
