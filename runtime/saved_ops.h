#pragma once

#include <torch/library.h>

namespace gpipe {

// Defines gpipe::saved_linear, gpipe::saved_matmul and
// gpipe::saved_convolution (see saved_ops.cpp) in the `gpipe` op library,
// which runtime/recompute.cpp registers.
void DefineSavedOps(torch::Library& library);

}  // namespace gpipe
