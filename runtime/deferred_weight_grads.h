#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/library.h>

namespace gpipe {

// The weight gradients of a stage's linear layers (gpipe::linear, see
// passes/defer_weight_gradients.h), deferred across micro-batches.
//
// A micro-batch's backward through `y = x W^T + b` adds dW_i = dY_i^T X_i
// into W.grad: on 8-row micro-batches that is a 1024 x 1024 product over 8
// rows, then a full pass over W.grad to add it, per micro-batch, which is
// memory traffic, not arithmetic (measured: 2x the time of the input's
// gradient). Instead each backward leaves (X_i, dY_i) here and Flush()
// computes dW = [dY_0; ...; dY_k]^T [X_0; ...; X_k] in micro-batch order, one
// product, added into .grad once (the bias: the rows' sum). Over all
// micro-batches of a step that is the product the unsplit model computes.
//
// Which micro-batches share a product is fixed by their indices, not by the
// order a schedule runs them in: groups of G consecutive micro-batches, G
// chosen from the first micro-batch's rows so that a group holds at most
// half the bytes of the weights it is for (that bounds the extra memory).
// A group is computed once all its micro-batches' backwards are done, and
// the rest after the stage's last backward of the step. So every schedule
// that runs a stage's backwards first to last computes the same products and
// sums them in the same order.
//
// Threading: Add() may run on any thread (a CUDA backward runs on the
// device's autograd thread); the rest runs on the stage's worker once its
// backward calls have returned. One mutex guards the state.
class DeferredWeightGrads : public torch::CustomClassHolder {
 public:
  // `parameters`: the stage's own; only their linear layers defer (a weight
  // that arrives as a stage input, e.g. a tied embedding, is a leaf of the
  // runtime's making whose gradient must go back at once).
  DeferredWeightGrads(const std::vector<at::Tensor>& parameters, size_t num_micro_batches);
  bool Defers(const at::Tensor& parameter) const;
  // `input` and `grad_output` are 2-D: rows x in, rows x out.
  void Add(size_t micro_batch, const at::Tensor& weight, const at::Tensor& bias,
           const at::Tensor& input, const at::Tensor& grad_output);
  // Micro-batch `micro_batch`'s backward on this stage has run (all its Add()s are in).
  void MarkDone(size_t micro_batch);
  // Adds the gradients of every group whose backwards are all done into
  // their weights' (and biases') .grad; `everything`: all that is pending.
  void Flush(bool everything);

 private:
  struct Rows {
    size_t micro_batch;
    at::Tensor input, grad_output;
  };
  struct Layer {
    at::Tensor weight, bias;  // bias undefined when the layer has none
    std::vector<Rows> pending;
  };
  void FlushRange(size_t begin, size_t end);  // micro-batches [begin, end), in order

  const size_t num_micro_batches_;
  std::unordered_set<const void*> parameters_;  // their TensorImpls
  mutable std::mutex mutex_;
  std::vector<Layer> layers_;                         // in first-use order
  std::unordered_map<const void*, size_t> layer_of_;  // weight's TensorImpl -> layer
  std::vector<int64_t> bytes_of_;  // [micro-batch] pending input + gradient bytes
  std::vector<bool> done_;         // [micro-batch]
  std::vector<bool> flushed_;      // [micro-batch]
  int64_t weight_bytes_ = 0;
  std::optional<size_t> group_size_;  // set when the first micro-batch is done
};

class DeferWeightGradsScope {
 public:
  DeferWeightGradsScope(c10::intrusive_ptr<DeferredWeightGrads> grads, size_t micro_batch);
  ~DeferWeightGradsScope();
  DeferWeightGradsScope(const DeferWeightGradsScope&) = delete;
  DeferWeightGradsScope& operator=(const DeferWeightGradsScope&) = delete;

 private:
  c10::intrusive_ptr<DeferredWeightGrads> previous_grads_;
  size_t previous_micro_batch_;
};

// The innermost scope's target on this thread (null grads outside any).
struct DeferralTarget {
  c10::intrusive_ptr<DeferredWeightGrads> grads;
  size_t micro_batch = 0;
};
const DeferralTarget& CurrentDeferral();

// Whether a linear layer with these operands defers: a target is set, grad
// mode is on, the weight is one of the stage's parameters and requires grad,
// and the bias, if it needs a gradient, is a leaf whose .grad the flush can
// add into.
bool DefersWeightGrad(const at::Tensor& weight, const c10::optional<at::Tensor>& bias);

// Defines gpipe::linear in the `gpipe` op library (runtime/recompute.cpp).
void DefineDeferredLinear(torch::Library& library);

}  // namespace gpipe
