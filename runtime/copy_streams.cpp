#include "runtime/copy_streams.h"

#include <vector>

#ifdef GPIPE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace gpipe {

at::Tensor CopyStreams::Copy(const at::Tensor& t, const c10::Device& to) {
  if (!t.defined() || t.device() == to) return t;
#ifdef GPIPE_WITH_CUDA
  if (separate_streams_ && (t.is_cuda() || to.is_cuda())) return CopyOnStreams(t, to);
#endif
  return t.to(to);
}

#ifdef GPIPE_WITH_CUDA
c10::cuda::CUDAStream CopyStreams::StreamOf(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    it = streams_.emplace(device, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)).first;
  }
  return it->second;
}

at::Tensor CopyStreams::CopyOnStreams(const at::Tensor& t, const c10::Device& to) {
  const c10::Device from = t.device();
  std::vector<c10::cuda::CUDAStream> copy;  // the copy streams of the CUDA ends
  if (from.is_cuda()) copy.push_back(StreamOf(from.index()));
  if (to.is_cuda() && !(from.is_cuda() && from.index() == to.index())) copy.push_back(StreamOf(to.index()));

  if (from.is_cuda()) {
    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream(from.index()));
    for (const auto& stream : copy) produced.block(stream);
  }
  at::Tensor result;
  {
    c10::cuda::CUDAMultiStreamGuard on_copy_streams(copy);
    // Asynchronous only towards a GPU: a CPU result must be complete on return.
    result = t.to(to, /*non_blocking=*/to.is_cuda());
    if (from.is_cuda()) t.record_stream(copy.front());
  }
  if (to.is_cuda()) {
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(to.index());
    result.record_stream(compute);
    at::cuda::CUDAEvent copied;
    copied.record(copy.back());
    copied.block(compute);
  }
  return result;
}
#endif

}  // namespace gpipe
