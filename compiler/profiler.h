#pragma once

#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/model_loader.h"
#include "passes/partition_units.h"

namespace gpipe {

// Measured cost of each partition unit on the sample input.
struct UnitProfile {
  std::vector<double> forward_ms;
  std::vector<double> backward_ms;
  std::vector<double> time_ms;  // forward + backward: the --balance-by time cost
  std::vector<double> parameter_bytes;
  std::vector<double> activation_bytes;  // kept from forward for backward
  std::vector<double> bytes;  // --balance-by size cost: parameters x (2, or 4 with Adam) + activations
};

// Compiles the model with one stage per unit into a temporary artifact next
// to `output_path`, runs it through the runtime with one micro-batch (so each
// task runs alone and is timed by the runtime's task trace) for one warm-up
// and options.profile_steps measured training steps, and takes the median.
// Activation bytes come from the runtime's per-stage allocation counts
// between forward and backward.
UnitProfile ProfileUnits(const LoweredModel& lowered, const std::vector<PartitionUnit>& units,
                         const std::vector<DeferredBatchNorm>& deferred, const CompileOptions& options,
                         const std::string& model_path, const std::string& output_path);

// The same measurement for the stages of any plan (forward + backward ms per
// stage): the calibration step of --balance-by time.
std::vector<double> ProfileStageTimes(const LoweredModel& lowered, const std::vector<PartitionUnit>& units,
                                      const StagePlan& plan, const std::vector<DeferredBatchNorm>& deferred,
                                      const CompileOptions& options, const std::string& model_path,
                                      const std::string& output_path);

}  // namespace gpipe
