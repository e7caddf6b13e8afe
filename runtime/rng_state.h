#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace gpipe {

// The state of LibTorch's default generators (CPU, and the CUDA device's when
// built with CUDA): what a training state saves so that whatever draws from
// them outside the stages (a loss, the user's code) resumes as it was. Stages
// draw from keyed generators instead (keyed_random.h).
struct RngState {
  at::Tensor cpu;
#ifdef GPIPE_WITH_CUDA
  at::Tensor cuda;
  int cuda_device = -1;
#endif
};

RngState CaptureRngState(const c10::Device& device);
void RestoreRngState(const RngState& state);

}  // namespace gpipe
