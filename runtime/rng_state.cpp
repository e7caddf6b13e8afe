#include "runtime/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#ifdef GPIPE_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace gpipe {

RngState CaptureRngState(const c10::Device& device) {
  RngState state;
  auto cpu = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(cpu.mutex());
    state.cpu = cpu.get_state();
  }
#ifdef GPIPE_WITH_CUDA
  if (device.is_cuda()) {
    auto cuda = at::cuda::detail::getDefaultCUDAGenerator(device.index());
    std::lock_guard<std::mutex> lock(cuda.mutex());
    state.cuda = cuda.get_state();
    state.cuda_device = device.index();
  }
#else
  (void)device;
#endif
  return state;
}

void RestoreRngState(const RngState& state) {
  auto cpu = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(cpu.mutex());
    cpu.set_state(state.cpu);
  }
#ifdef GPIPE_WITH_CUDA
  if (state.cuda.defined()) {
    auto cuda = at::cuda::detail::getDefaultCUDAGenerator(state.cuda_device);
    std::lock_guard<std::mutex> lock(cuda.mutex());
    cuda.set_state(state.cuda);
  }
#endif
}

}  // namespace gpipe
