#pragma once

// The one place that knows which LibTorch gpipe-cpp is built against:
// Debian's 1.13.1 (C++17) or a pip torch 2.x (C++20 from 2.14 on). Code
// elsewhere uses these names and never tests versions itself.

#include <memory>
#include <utility>

#include <torch/csrc/autograd/function.h>
#include <torch/version.h>  // TORCH_VERSION_MAJOR / _MINOR

#define GPIPE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// ATen's own headers refuse C++17 from 2.14 on; say how to configure instead.
#if GPIPE_TORCH_AT_LEAST(2, 14) && __cplusplus < 202002L
#error "LibTorch >= 2.14 needs C++20: configure gpipe-cpp with its CMakeLists.txt (it raises the standard)"
#endif

namespace gpipe::compat {

// LibTorch's optional in its own virtual signatures (torch::data's
// Dataset::size): c10::optional in 1.13, std::optional from 2.x (where
// c10::optional is an alias of it).
template <class T>
using TorchOptional = c10::optional<T>;

// An autograd graph node of our own (PipelineBackward): a std::shared_ptr
// with LibTorch's stack-safe deleteNode up to 2.12; from 2.13 on nodes are
// c10::intrusive_ptr (Edge::function, set_history and grad_fn all take one).
#if GPIPE_TORCH_AT_LEAST(2, 13)
template <class T>
using NodePtr = c10::intrusive_ptr<T>;
template <class T, class... Args>
NodePtr<T> MakeNode(Args&&... args) {
  return c10::make_intrusive<T>(std::forward<Args>(args)...);
}
#else
template <class T>
using NodePtr = std::shared_ptr<T>;
template <class T, class... Args>
NodePtr<T> MakeNode(Args&&... args) {
  return NodePtr<T>(new T(std::forward<Args>(args)...), torch::autograd::deleteNode);
}
#endif

}  // namespace gpipe::compat
