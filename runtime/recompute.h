#pragma once

#include <vector>

#include <torch/script.h>

namespace gpipe {

// True on a worker thread while it recomputes a checkpointed forward, so code
// that must not repeat a side effect can tell (torchgpipe's is_recomputing()).
// Also registered as the TorchScript op `gpipe::is_recomputing() -> bool`.
bool is_recomputing();

// Marks the current thread as recomputing for its lifetime.
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool previous_;
};

// Keeps a module's buffers as they were: a recompute replays the forward, so
// batch norm's running statistics (and anything else updated in place) must
// not change a second time. Restores on destruction, which must come after
// the backward that used the recompute (eval-mode batch norm saves the
// buffers for backward); only changed buffers are written back.
class BufferSnapshot {
 public:
  explicit BufferSnapshot(torch::jit::Module& module);
  ~BufferSnapshot();
  BufferSnapshot(const BufferSnapshot&) = delete;
  BufferSnapshot& operator=(const BufferSnapshot&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;  // buffer, copy
};

}  // namespace gpipe
