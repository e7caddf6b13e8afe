#pragma once

#include <vector>

#include "compiler/build_pipeline.h"
#include "compiler/compile_options.h"

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

// Builds the program with one stage per unit into a temporary artifact (in a
// scratch directory under the system's temporary directory, removed
// afterwards), runs it through the runtime with one micro-batch (so each
// task runs alone and is timed by the runtime's task trace) for one warm-up
// and options.profile_steps measured training steps, and takes the median.
// Activation bytes come from the runtime's per-stage allocation counts
// between forward and backward.
UnitProfile ProfileUnits(const LoweredProgram& program, const CompileOptions& options);

// The same measurement for the stages of any plan (forward + backward ms per
// stage): the calibration step of --balance-by time.
std::vector<double> ProfileStageTimes(const LoweredProgram& program, const StagePlan& plan,
                                      const CompileOptions& options);

}  // namespace gpipe
