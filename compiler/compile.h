#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/model_loader.h"
#include "compiler/stage_plan.h"
#include "passes/defer_batch_norm.h"
#include "runtime/artifact.h"
#include "runtime/checkpoint_mode.h"
#include "runtime/manifest.h"
#include "runtime/sample_input.h"

namespace gpipe {

enum class BalanceBy {
  Time,  // forward + backward time per unit, measured on the sample input
  Size,  // parameter, gradient and optimizer-state bytes + activation bytes kept for backward
};

struct CompileOptions {
  BalanceRequest balance;
  std::vector<std::string> split_before;  // submodule paths; when given, replaces `balance`
  int64_t chunks = 1;
  CheckpointMode checkpoint = CheckpointMode::ExceptLast;
  std::vector<std::string> devices;  // one per stage; empty = all "cpu"
  SkipRouting skip_routing = SkipRouting::Direct;  // PassThrough only for the ablation benchmark
  std::vector<int> ranks;  // process of each stage under --distributed; empty = one stage per rank
  bool deferred_batch_norm = false;  // running statistics from the whole mini-batch
  size_t unit_depth = 1;             // module-hierarchy level that units are taken from
  std::optional<BalanceBy> balance_by;  // profile and partition optimally into balance.num_stages
  std::vector<InputSpec> sample_inputs;  // for balance_by
  int64_t profile_steps = 5;             // measured steps (after one warm-up); the median counts
  bool adam = false;                     // size: count Adam's two state tensors per parameter
  int64_t calibration_rounds = 2;  // time: re-measure the chosen stages, rescale, re-partition
  std::function<void(const std::string& what, size_t done, size_t total)> progress;
};

struct CompileReport {
  std::vector<double> unit_costs;  // when balanced by time (ms) or size (bytes)
  std::vector<double> measured_stage_ms;  // time balance with calibration: the chosen stages, measured
  std::vector<double> calibration_ratios;  // measured max/mean stage time of each plan tried
  Manifest manifest;
  std::vector<std::string> unit_names;  // all units of the model, in order
  std::vector<int64_t> balance;         // units per stage, as chosen
  std::vector<int64_t> parameter_counts;  // elements per stage
};

// The stage modules and manifest for one plan (not written anywhere yet).
struct BuiltPipeline {
  Manifest manifest;
  std::vector<ArtifactRecord> records;
  std::vector<int64_t> balance;           // units per stage
  std::vector<int64_t> parameter_counts;  // elements per stage
  std::vector<int64_t> parameter_bytes;
};
BuiltPipeline BuildPipeline(const LoweredModel& lowered, const std::vector<PartitionUnit>& units,
                            const StagePlan& plan, const std::vector<DeferredBatchNorm>& deferred,
                            const CompileOptions& options, const std::string& model_path);

// Loads `model_path`, splits it and writes the artifact to `output_path`
// (atomically). Throws c10::Error with a message naming the problem and fix.
CompileReport CompileModel(const std::string& model_path, const std::string& output_path,
                           const CompileOptions& options);

}  // namespace gpipe
