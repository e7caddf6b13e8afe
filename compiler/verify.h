#pragma once

#include <string>
#include <vector>

#include "runtime/sample_input.h"

namespace gpipe {

struct VerifyResult {
  double output_diff = 0;  // max |pipeline - original| / max(1, max |original|), over outputs
  double grad_diff = 0;    // the same over every parameter gradient of sum(outputs)
  std::string worst_grad;  // parameter with the largest gradient difference
  size_t parameters_compared = 0;
  bool ok = false;         // both within tolerance
};

// Runs the original model and the artifact on the same seeded random input,
// both in eval mode (dropout off) with the simple graph executor (the
// profiling executor re-optimises after warm-up runs, which changes the last
// bits), and compares outputs and the gradients of sum(outputs).
VerifyResult VerifyArtifact(const std::string& model_path, const std::string& artifact_path,
                            const std::vector<InputSpec>& inputs, double tolerance);

// RAII switch to the simple executor, restoring the previous mode.
class SimpleExecutorScope {
 public:
  SimpleExecutorScope();
  ~SimpleExecutorScope();

 private:
  bool previous_;
};

}  // namespace gpipe
