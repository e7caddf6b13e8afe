#pragma once

#include <string>
#include <vector>

#include "compiler/compile_options.h"
#include "compiler/model_loader.h"
#include "passes/defer_batch_norm.h"
#include "passes/partition_units.h"
#include "runtime/artifact.h"
#include "runtime/manifest.h"

namespace gpipe {

// Everything a plan is built from: the lowered model, its batch norms taken
// over by --deferred-batch-norm, and the units cuts fall between.
struct LoweredProgram {
  LoweredModel lowered;
  std::vector<DeferredBatchNorm> deferred;
  std::vector<PartitionUnit> units;
  std::string source_name;  // the model's file name, for the manifest
};

// The stage modules and manifest for one plan (not written anywhere yet).
struct BuiltPipeline {
  Manifest manifest;
  std::vector<ArtifactRecord> records;
  std::vector<int64_t> balance;           // units per stage
  std::vector<int64_t> parameter_counts;  // elements per stage
  std::vector<int64_t> parameter_bytes;
};

// Splits the program at `plan` and builds one TorchScript module per stage,
// with the devices, ranks, chunks and checkpointing of `options`.
BuiltPipeline BuildPipeline(const LoweredProgram& program, const StagePlan& plan,
                            const CompileOptions& options);

}  // namespace gpipe
