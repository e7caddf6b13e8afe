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
  for (const auto& buffer : module.named_buffers(/*recurse=*/true)) {
    // "1.bn.running_mean": the attribute running_mean of submodule 1.bn.
    torch::jit::Module owner = module;
    std::string name = buffer.name;
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.')) {
      owner = owner.attr(name.substr(0, dot)).toModule();
      name.erase(0, dot + 1);
    }
    held_.push_back({owner, name, buffer.value});
    owner.setattr(name, buffer.value.clone());
  }
}

BufferSnapshot::~BufferSnapshot() {
  for (auto& held : held_) held.owner.setattr(held.name, held.original);
}

}  // namespace gpipe

TORCH_LIBRARY(gpipe, m) {
  m.def("is_recomputing() -> bool", &gpipe::is_recomputing);
  gpipe::DefineSavedOps(m);
  gpipe::DefineKeyedRandomOps(m);
  gpipe::DefineDeferredLinear(m);
}
