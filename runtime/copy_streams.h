#pragma once

#include <ATen/ATen.h>

#ifdef GPIPE_WITH_CUDA
#include <map>
#include <mutex>

#include <c10/cuda/CUDAStream.h>
#endif

namespace gpipe {

// The copy nodes of a compiled artifact, executed: moves a tensor across a
// device boundary (between consecutive stages, along a skip route, and a
// gradient on its way back).
//
// On CUDA each device gets one copy stream, so that a transfer overlaps the
// kernels of the micro-batch computing next to it (torchgpipe's
// Copy/Wait). The compute stream of a device is its current stream in the
// worker threads, i.e. its default stream, as in torchgpipe. For a copy of
// `t` from device A to device B:
//   1. the copy stream(s) wait for an event recorded on A's compute stream,
//      so the copy reads `t` only after its producer wrote it;
//   2. the copy runs with the copy streams of its CUDA ends current (ATen's
//      copy uses the current stream of the device it runs on);
//   3. `t.record_stream(copy of A)`: the caching allocator must not hand
//      `t`'s memory to a new tensor while the copy may still read it, even if
//      the producer drops `t` at once;
//   4. the result, allocated on B's copy stream, is recorded on B's compute
//      stream (it is used and freed there), and B's compute stream waits for
//      an event recorded after the copy.
// A copy to the CPU blocks until the data is there (the CPU has no stream).
//
// Without CUDA, or with `separate_streams` off (the ablation of
// bench/gpu.sh), a copy is a plain `Tensor::to` on the compute stream.
// Safe to call from several worker threads at once.
class CopyStreams {
 public:
  explicit CopyStreams(bool separate_streams = true) : separate_streams_(separate_streams) {}
  CopyStreams(const CopyStreams&) = delete;
  CopyStreams& operator=(const CopyStreams&) = delete;

  // `t` on `to` (`t` itself when it is there already), ready for use on
  // `to`'s compute stream.
  at::Tensor Copy(const at::Tensor& t, const c10::Device& to);

 private:
  bool separate_streams_;
#ifdef GPIPE_WITH_CUDA
  at::Tensor CopyOnStreams(const at::Tensor& t, const c10::Device& to);
  c10::cuda::CUDAStream StreamOf(c10::DeviceIndex device);

  std::mutex mutex_;
  std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams_;
#endif
};

}  // namespace gpipe
