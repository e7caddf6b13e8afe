#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/stage_plan.h"
#include "passes/split_stages.h"
#include "runtime/checkpoint_mode.h"
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
  // --activation-budget: MiB per stage and micro-batch in flight that each
  // stage's recompute plan must fit (activation_budget.h); needs sample_inputs.
  std::optional<double> activation_budget_mib;
  std::string schedule = "gpipe";  // kept in the manifest for train_step (schedule_ir.h)
  int64_t virtual_stages = 1;
  std::vector<std::string> devices;                // one per stage; empty = all "cpu"
  SkipRouting skip_routing = SkipRouting::Direct;  // PassThrough only for the ablation benchmark
  std::vector<int> ranks;  // process of each stage under --distributed; empty = one stage per rank
  bool deferred_batch_norm = false;  // running statistics from the whole mini-batch
  // Module-hierarchy level that units are taken from; unset = chosen for the
  // stage count (ChooseUnits), or level 1 for an explicit --balance.
  std::optional<size_t> unit_depth;
  std::optional<BalanceBy> balance_by;  // profile and partition optimally into balance.num_stages
  // The sample the model is compiled for (--sample-input): recorded in the
  // artifact (dtype, shape) to check inputs against, and profiled on by balance_by.
  std::vector<InputSpec> sample_inputs;
  std::vector<std::string> unbatched_inputs;  // tensor arguments given whole to every micro-batch
  int64_t profile_steps = 5;       // measured steps (after one warm-up); the median counts
  bool adam = false;               // size: count Adam's two state tensors per parameter
  int64_t calibration_rounds = 2;  // time: re-measure the chosen stages, rescale, re-partition
  std::function<void(const std::string& what, size_t done, size_t total)> progress;
};

}  // namespace gpipe
