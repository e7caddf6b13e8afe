#pragma once

#include <string>
#include <vector>

#include "runtime/sample_input.h"

namespace gpipe {

struct VerifyResult {
  double output_diff = 0;  // max |pipeline - original| / max(1, max |original|), over outputs
  std::string worst_output;  // the output with the largest difference, by path ("logits", "out[1]")
  double grad_diff = 0;    // the same over every parameter gradient of sum(outputs)
  std::string worst_grad;  // parameter with the largest gradient difference
  size_t parameters_compared = 0;
  // The largest difference, over outputs and gradients, from the original run
  // on the same micro-batches with a stage's intra-op threads (the same kernels).
  double same_micro_batches_diff = 0;
  // Against the original model run in float64 (when it converts): the largest
  // scaled error of the pipeline and of the float32 original, over all tensors.
  bool has_float64 = false;
  double pipeline_error = 0;
  double original_error = 0;
  // Every tensor is within tolerance of the original, or (float64 reference)
  // no more than twice as far from the true value as the original is, plus
  // tolerance: a pipeline is not failed for rounding differently, e.g. when
  // float32 kernels for small micro-batches are less (or more) accurate than
  // for the batch (kRoundingSlack in verify.cpp).
  bool ok = false;
};

// Runs the original model and the artifact on the same seeded random input
// (and the original once more on the pipeline's micro-batches),
// both in eval mode (dropout off) with the simple graph executor (the
// profiling executor re-optimises after warm-up runs, which changes the last
// bits), and compares outputs and the gradients of sum(outputs); also runs the
// original in float64 as a reference where the model converts.
VerifyResult VerifyArtifact(const std::string& model_path, const std::string& artifact_path,
                            const std::vector<InputSpec>& inputs, double tolerance);

}  // namespace gpipe
