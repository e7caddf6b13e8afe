#pragma once

#include <torch/csrc/jit/runtime/graph_executor.h>

namespace gpipe {

// RAII: while it lives, graph executors made are LibTorch's executor that
// plans once per argument signature (ArgumentSpec), not the default
// profiling executor, whose plan for a graph changes after its first runs;
// the previous process-wide mode is restored at the end. The mode is read
// when an executor is made, so a scope around making them is enough.
class SignatureKeyedExecutorScope {
 public:
  SignatureKeyedExecutorScope() : previous_(torch::jit::getExecutorMode()) {
    torch::jit::getExecutorMode() = false;
  }
  ~SignatureKeyedExecutorScope() { torch::jit::getExecutorMode() = previous_; }
  SignatureKeyedExecutorScope(const SignatureKeyedExecutorScope&) = delete;
  SignatureKeyedExecutorScope& operator=(const SignatureKeyedExecutorScope&) = delete;

 private:
  bool previous_;
};

}  // namespace gpipe
