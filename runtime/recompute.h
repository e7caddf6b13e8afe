#pragma once

#include <string>
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
// not change a second time. For its lifetime the module's buffers are
// copies, which the recompute updates and its graph saves; on destruction,
// which must come after the backward that used the recompute, the originals
// are put back, never written. Writing them back instead would bump their
// version counters, and another micro-batch's graph that saved them (batch
// norm in training saves its running statistics) and is not recomputed,
// under except_last, would then refuse its backward as "modified by an
// inplace operation".
class BufferSnapshot {
 public:
  explicit BufferSnapshot(torch::jit::Module& module);
  ~BufferSnapshot();
  BufferSnapshot(const BufferSnapshot&) = delete;
  BufferSnapshot& operator=(const BufferSnapshot&) = delete;

 private:
  // Per buffer: the module holding it, its attribute name there, the original.
  struct Held {
    torch::jit::Module owner;
    std::string name;
    at::Tensor original;
  };
  std::vector<Held> held_;
};

}  // namespace gpipe
