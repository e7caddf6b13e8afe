// The replay ops of selective checkpointing (passes/split_for_recompute.h):
// in a stage's recompute graph, `gpipe::saved_linear(saved, input, weight,
// bias)` stands where `aten::linear(input, weight, bias)` was. Its forward
// returns the value the stage's forward saved, so the product is not computed
// a second time; its backward computes the same gradients as the product's
// own backward, from the (recomputed) input and the weight. Each is a custom
// autograd Function, registered as a composite op so that TorchScript graphs
// call it and autograd sees one node.

#include "runtime/saved_ops.h"

#include "runtime/deferred_weight_grads.h"

#include <ATen/ExpandUtils.h>
#include <torch/csrc/autograd/custom_function.h>

namespace gpipe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The saved value as a new tensor (not a view: the graph may write to it in
// place no more than it did in forward, which ChooseSelectiveSaves checks).
at::Tensor Replay(const at::Tensor& saved) { return saved.detach(); }

struct SavedLinear : torch::autograd::Function<SavedLinear> {
  // `grads`: where the weight's gradient is deferred to (null: computed here,
  // see deferred_weight_grads.h). `bias`: none or one tensor (autograd takes
  // no undefined inputs).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& saved, const at::Tensor& input,
                            const at::Tensor& weight, c10::intrusive_ptr<DeferredWeightGrads> grads,
                            int64_t micro_batch, at::TensorList bias) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["has_bias"] = !bias.empty();
    if (grads) {
      ctx->saved_data["grads"] = c10::IValue::make_capsule(std::move(grads));
      ctx->saved_data["micro_batch"] = micro_batch;
      if (!bias.empty()) ctx->saved_data["bias"] = bias[0];
    }
    return Replay(saved);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto vars = ctx->get_saved_variables();
    const at::Tensor& input = vars[0];
    const at::Tensor& weight = vars[1];
    const at::Tensor& grad = grads[0];
    at::Tensor grad_input, grad_weight, grad_bias;
    const int64_t out = weight.size(0), in = weight.size(-1);
    at::Tensor flat_grad = grad.reshape({-1, out});
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    if (ctx->needs_input_grad(1)) grad_input = grad.matmul(weight);
    if (ctx->saved_data.count("grads")) {
      auto deferred = c10::static_intrusive_pointer_cast<DeferredWeightGrads>(
          ctx->saved_data["grads"].toCapsule());
      deferred->Add(static_cast<size_t>(ctx->saved_data["micro_batch"].toInt()), weight,
                    has_bias ? ctx->saved_data["bias"].toTensor() : at::Tensor(),
                    input.reshape({-1, in}), flat_grad);
    } else {
      if (ctx->needs_input_grad(2)) grad_weight = flat_grad.t().mm(input.reshape({-1, in}));
      if (has_bias && ctx->needs_input_grad(3)) grad_bias = flat_grad.sum(0);  // tensor inputs only
    }
    variable_list result{at::Tensor(), grad_input, grad_weight, at::Tensor(), at::Tensor()};
    if (has_bias) result.push_back(grad_bias);
    return result;
  }
};

struct SavedMatmul : torch::autograd::Function<SavedMatmul> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& saved, const at::Tensor& a,
                            const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return Replay(saved);
  }

  // torch.matmul's broadcasting rules, backwards: a 1-D operand is a row
  // (left) or a column (right) that the product then drops; batch
  // dimensions broadcast and their gradients sum back to each operand's shape.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto vars = ctx->get_saved_variables();
    at::Tensor a = vars[0], b = vars[1], grad = grads[0];
    const bool a_vector = a.dim() == 1, b_vector = b.dim() == 1;
    at::Tensor grad_a, grad_b;
    if (a_vector && b_vector) {
      if (ctx->needs_input_grad(1)) grad_a = grad * b;
      if (ctx->needs_input_grad(2)) grad_b = grad * a;
      return {at::Tensor(), grad_a, grad_b};
    }
    at::Tensor a2 = a_vector ? a.unsqueeze(0) : a;
    at::Tensor b2 = b_vector ? b.unsqueeze(-1) : b;
    at::Tensor g2 = grad;
    if (a_vector) g2 = g2.unsqueeze(-2);
    if (b_vector) g2 = g2.unsqueeze(-1);
    if (ctx->needs_input_grad(1)) {
      grad_a = at::sum_to(g2.matmul(b2.transpose(-1, -2)), a2.sizes());
      if (a_vector) grad_a = grad_a.squeeze(0);
    }
    if (ctx->needs_input_grad(2)) {
      if (b2.dim() == 2) {  // a weight: one product over every row of every batch
        const int64_t k = a2.size(-1);
        grad_b = a2.reshape({-1, k}).t().mm(g2.reshape({-1, g2.size(-1)}));
      } else {
        grad_b = at::sum_to(a2.transpose(-1, -2).matmul(g2), b2.sizes());
      }
      if (b_vector) grad_b = grad_b.squeeze(-1);
    }
    return {at::Tensor(), grad_a, grad_b};
  }
};

struct SavedConvolution : torch::autograd::Function<SavedConvolution> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& saved, const at::Tensor& input,
                            const at::Tensor& weight, std::vector<int64_t> stride,
                            std::vector<int64_t> padding, std::vector<int64_t> dilation,
                            int64_t groups, at::TensorList bias) {  // bias last: none or one
    ctx->save_for_backward({input, weight});
    ctx->saved_data["has_bias"] = !bias.empty();
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["dilation"] = dilation;
    ctx->saved_data["groups"] = groups;
    return Replay(saved);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto vars = ctx->get_saved_variables();
    at::Tensor input = vars[0], weight = vars[1], grad = grads[0];
    // conv2d takes an unbatched [C, H, W] input; convolution_backward does not.
    const bool unbatched = input.dim() == weight.dim() - 1;
    if (unbatched) {
      input = input.unsqueeze(0);
      grad = grad.unsqueeze(0);
    }
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    std::vector<int64_t> stride = ctx->saved_data["stride"].toIntVector();
    std::vector<int64_t> padding = ctx->saved_data["padding"].toIntVector();
    std::vector<int64_t> dilation = ctx->saved_data["dilation"].toIntVector();
    std::vector<int64_t> output_padding(stride.size(), 0);
    std::vector<int64_t> bias_sizes{weight.size(0)};
    auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
        grad, input, weight, has_bias ? c10::optional<at::IntArrayRef>(bias_sizes) : c10::nullopt,
        stride, padding, dilation, /*transposed=*/false, output_padding,
        ctx->saved_data["groups"].toInt(),
        {ctx->needs_input_grad(1), ctx->needs_input_grad(2), has_bias && ctx->needs_input_grad(3)});
    if (unbatched && grad_input.defined()) grad_input = grad_input.squeeze(0);
    variable_list grads_out{at::Tensor(), grad_input, grad_weight, at::Tensor(),
                            at::Tensor(),  at::Tensor(), at::Tensor()};
    if (has_bias) grads_out.push_back(grad_bias);
    return grads_out;
  }
};

std::vector<at::Tensor> AsList(const c10::optional<at::Tensor>& t) {
  if (t && t->defined()) return {*t};
  return {};
}

at::Tensor SavedLinearOp(const at::Tensor& saved, const at::Tensor& input, const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias) {
  std::vector<at::Tensor> bias_list = AsList(bias);
  const bool defers = DefersWeightGrad(weight, bias);
  return SavedLinear::apply(
      saved, input, weight,
      defers ? CurrentDeferral().grads : c10::intrusive_ptr<DeferredWeightGrads>(),
      static_cast<int64_t>(CurrentDeferral().micro_batch), at::TensorList(bias_list));
}

at::Tensor SavedMatmulOp(const at::Tensor& saved, const at::Tensor& a, const at::Tensor& b) {
  return SavedMatmul::apply(saved, a, b);
}

at::Tensor SavedConvolutionOp(const at::Tensor& saved, const at::Tensor& input,
                              const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                              std::vector<int64_t> stride, std::vector<int64_t> padding,
                              std::vector<int64_t> dilation, int64_t groups) {
  std::vector<at::Tensor> bias_list = AsList(bias);
  return SavedConvolution::apply(saved, input, weight, std::move(stride), std::move(padding),
                                 std::move(dilation), groups, at::TensorList(bias_list));
}

}  // namespace

void DefineSavedOps(torch::Library& library) {
  library.def("saved_linear(Tensor saved, Tensor input, Tensor weight, Tensor? bias) -> Tensor",
              &SavedLinearOp);
  library.def("saved_matmul(Tensor saved, Tensor self, Tensor other) -> Tensor", &SavedMatmulOp);
  library.def(
      "saved_convolution(Tensor saved, Tensor input, Tensor weight, Tensor? bias, int[] stride, "
      "int[] padding, int[] dilation, int groups) -> Tensor",
      &SavedConvolutionOp);
}

}  // namespace gpipe
