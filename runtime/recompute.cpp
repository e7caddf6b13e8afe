#include "runtime/recompute.h"

#include <torch/library.h>

#include "runtime/deferred_weight_grads.h"
#include "runtime/keyed_random.h"
#include "runtime/saved_ops.h"

namespace gpipe {
namespace {
thread_local bool recomputing = false;
}  // namespace

bool is_recomputing() { return recomputing; }

RecomputeScope::RecomputeScope() : previous_(recomputing) { recomputing = true; }
RecomputeScope::~RecomputeScope() { recomputing = previous_; }

BufferSnapshot::BufferSnapshot(torch::jit::Module& module) {
  at::NoGradGuard no_grad;
  for (const auto& buffer : module.buffers()) saved_.emplace_back(buffer, buffer.clone());
}

BufferSnapshot::~BufferSnapshot() {
  at::NoGradGuard no_grad;
  for (auto& [buffer, copy] : saved_) {
    if (!buffer.equal(copy)) buffer.copy_(copy);
  }
}

}  // namespace gpipe

TORCH_LIBRARY(gpipe, m) {
  m.def("is_recomputing() -> bool", &gpipe::is_recomputing);
  gpipe::DefineSavedOps(m);
  gpipe::DefineKeyedRandomOps(m);
  gpipe::DefineDeferredLinear(m);
}
