#include "runtime/deferred_weight_grads.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace gpipe {
namespace {

thread_local DeferralTarget current;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t BytesOf(const at::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

// aten::linear with the weight's (and bias's) gradient left to `grads`; the
// forward is aten::linear's own, the input's gradient is aten's product
// (grad . W, as LinearBackward's mm).
struct DeferredLinear : torch::autograd::Function<DeferredLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            c10::intrusive_ptr<DeferredWeightGrads> grads, int64_t micro_batch,
                            at::TensorList bias) {  // bias last: none or one
    ctx->save_for_backward({input, weight});
    ctx->saved_data["grads"] = c10::IValue::make_capsule(std::move(grads));
    ctx->saved_data["micro_batch"] = micro_batch;
    ctx->saved_data["has_bias"] = !bias.empty();
    if (!bias.empty()) ctx->saved_data["bias"] = bias[0];
    return at::linear(input, weight, bias.empty() ? c10::optional<at::Tensor>() : bias[0]);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto vars = ctx->get_saved_variables();
    const at::Tensor& input = vars[0];
    const at::Tensor& weight = vars[1];
    const at::Tensor& grad = grad_outputs[0];
    at::Tensor grad_input;
    if (ctx->needs_input_grad(0)) grad_input = grad.matmul(weight);
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    if (grad.defined()) {
      auto grads = c10::static_intrusive_pointer_cast<DeferredWeightGrads>(
          ctx->saved_data["grads"].toCapsule());
      const at::Tensor bias = has_bias ? ctx->saved_data["bias"].toTensor() : at::Tensor();
      grads->Add(static_cast<size_t>(ctx->saved_data["micro_batch"].toInt()), weight, bias,
                 input.reshape({-1, weight.size(-1)}), grad.reshape({-1, weight.size(0)}));
    }
    variable_list result{grad_input, at::Tensor(), at::Tensor(), at::Tensor()};
    if (has_bias) result.emplace_back();
    return result;
  }
};

at::Tensor LinearOp(const at::Tensor& input, const at::Tensor& weight,
                    const c10::optional<at::Tensor>& bias) {
  if (!DefersWeightGrad(weight, bias)) return at::linear(input, weight, bias);
  std::vector<at::Tensor> bias_list;
  if (bias && bias->defined()) bias_list.push_back(*bias);
  return DeferredLinear::apply(input, weight, current.grads,
                               static_cast<int64_t>(current.micro_batch),
                               at::TensorList(bias_list));
}

}  // namespace

DeferredWeightGrads::DeferredWeightGrads(const std::vector<at::Tensor>& parameters,
                                         size_t num_micro_batches)
    : num_micro_batches_(num_micro_batches),
      bytes_of_(num_micro_batches, 0),
      done_(num_micro_batches, false),
      flushed_(num_micro_batches, false) {
  for (const at::Tensor& p : parameters) parameters_.insert(p.unsafeGetTensorImpl());
}

bool DeferredWeightGrads::Defers(const at::Tensor& parameter) const {
  return parameters_.count(parameter.unsafeGetTensorImpl()) != 0;  // read-only after construction
}

void DeferredWeightGrads::Add(size_t micro_batch, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& input, const at::Tensor& grad_output) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_INTERNAL_ASSERT(micro_batch < num_micro_batches_ && !flushed_[micro_batch]);
  auto [it, added] = layer_of_.emplace(weight.unsafeGetTensorImpl(), layers_.size());
  if (added) {
    layers_.push_back({weight, bias, {}});
    weight_bytes_ += BytesOf(weight);
  }
  layers_[it->second].pending.push_back({micro_batch, input, grad_output});
  bytes_of_[micro_batch] += BytesOf(input) + BytesOf(grad_output);
}

void DeferredWeightGrads::MarkDone(size_t micro_batch) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_[micro_batch] = true;
  if (!group_size_ && bytes_of_[micro_batch] > 0) {
    group_size_ =
        static_cast<size_t>(std::max<int64_t>(1, weight_bytes_ / 2 / bytes_of_[micro_batch]));
  }
}

void DeferredWeightGrads::Flush(bool everything) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (everything) {
    FlushRange(0, num_micro_batches_);
    return;
  }
  if (!group_size_) return;
  for (size_t begin = 0; begin < num_micro_batches_; begin += *group_size_) {
    const size_t end = std::min(num_micro_batches_, begin + *group_size_);
    if (flushed_[begin]) continue;
    bool complete = true;
    for (size_t i = begin; i < end && complete; ++i) complete = done_[i];
    if (complete) FlushRange(begin, end);
  }
}

void DeferredWeightGrads::FlushRange(size_t begin, size_t end) {
  at::NoGradGuard no_grad;
  auto accumulate = [](at::Tensor& parameter, const at::Tensor& grad) {
    at::Tensor& into = parameter.mutable_grad();
    into = into.defined() ? into + grad : grad;
  };
  for (Layer& layer : layers_) {
    std::vector<Rows> group, rest;
    for (Rows& rows : layer.pending) {
      (rows.micro_batch >= begin && rows.micro_batch < end ? group : rest)
          .push_back(std::move(rows));
    }
    layer.pending = std::move(rest);
    if (group.empty()) continue;
    // Micro-batch order, whichever order the schedule ran them in.
    std::stable_sort(group.begin(), group.end(),
                     [](const Rows& a, const Rows& b) { return a.micro_batch < b.micro_batch; });
    std::vector<at::Tensor> inputs, grads;
    for (const Rows& rows : group) {
      inputs.push_back(rows.input);
      grads.push_back(rows.grad_output);
    }
    at::Tensor input = inputs.size() == 1 ? inputs[0] : at::cat(inputs);
    at::Tensor grad = grads.size() == 1 ? grads[0] : at::cat(grads);
    accumulate(layer.weight, grad.t().mm(input));
    if (layer.bias.defined() && layer.bias.requires_grad()) accumulate(layer.bias, grad.sum(0));
  }
  for (size_t i = begin; i < end; ++i) {
    flushed_[i] = true;
    bytes_of_[i] = 0;
  }
}

DeferWeightGradsScope::DeferWeightGradsScope(c10::intrusive_ptr<DeferredWeightGrads> grads,
                                             size_t micro_batch)
    : previous_grads_(std::move(current.grads)), previous_micro_batch_(current.micro_batch) {
  current.grads = std::move(grads);
  current.micro_batch = micro_batch;
}

DeferWeightGradsScope::~DeferWeightGradsScope() {
  current.grads = std::move(previous_grads_);
  current.micro_batch = previous_micro_batch_;
}

const DeferralTarget& CurrentDeferral() { return current; }

bool DefersWeightGrad(const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  if (!current.grads || !at::GradMode::is_enabled()) return false;
  if (!weight.requires_grad() || !current.grads->Defers(weight)) return false;
  return !bias || !bias->defined() || !bias->requires_grad() || bias->is_leaf();
}

void DefineDeferredLinear(torch::Library& library) {
  library.def("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", &LinearOp);
}

}  // namespace gpipe
