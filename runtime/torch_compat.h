#pragma once

// The one place that knows which LibTorch gpipe-cpp is built against:
// Debian's 1.13.1 (C++17) or a pip torch 2.x (C++20 from 2.14 on). Code
// elsewhere uses these names and never tests versions itself.

#include <memory>
#include <utility>

#include <ATen/ATen.h>
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

// aten::scaled_dot_product_attention with all its arguments (`scale` from
// 2.1, `enable_gqa` from 2.5). Only models exported by torch 2.x call it, so
// the 1.13 build never reaches the error.
inline at::Tensor ScaledDotProductAttention(const at::Tensor& query, const at::Tensor& key,
                                            const at::Tensor& value,
                                            const c10::optional<at::Tensor>& attn_mask,
                                            double dropout_p, bool is_causal,
                                            c10::optional<double> scale, bool enable_gqa) {
#if GPIPE_TORCH_AT_LEAST(2, 5)
  return at::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                          enable_gqa);
#else
  (void)query, (void)key, (void)value, (void)attn_mask, (void)dropout_p, (void)is_causal,
      (void)scale, (void)enable_gqa;
  TORCH_CHECK(false, "scaled_dot_product_attention needs LibTorch 2.5 or newer; this gpipe-cpp is "
                     "built against ", TORCH_VERSION, ": build it with scripts/setup_torch2.sh");
#endif
}

// Softmax over `dim` that gives 0, not NaN, on a row masked out entirely: what
// ATen's attention uses from 2.5 on (_safe_softmax).
inline at::Tensor AttentionSoftmax(const at::Tensor& scores, int64_t dim) {
#if GPIPE_TORCH_AT_LEAST(2, 5)
  return at::_safe_softmax(scores, dim);
#else
  return at::softmax(scores, dim);
#endif
}

}  // namespace gpipe::compat
