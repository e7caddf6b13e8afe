#include "runtime/training_loss.h"

#include <sstream>

#include <ATen/ATen.h>

namespace gpipe {
namespace {

const char* const kLossNames = "cross_entropy, nll, mse, bce_with_logits, model or sum";

std::string Shape(const at::Tensor& t) {
  std::ostringstream text;
  text << t.sizes();
  return text.str();
}

bool ClassLoss(const LossOptions& loss) {
  return loss.kind == "cross_entropy" || loss.kind == "nll";
}

// Class losses take [N, C] against [N]: a language model's [B, L, V]
// against [B, L] flattens its positions into the batch.
std::pair<at::Tensor, at::Tensor> AsClassProblem(const LossOptions& loss, const at::Tensor& output,
                                                 const at::Tensor& targets) {
  TORCH_CHECK(!at::isFloatingType(targets.scalar_type()), "--loss ", loss.kind,
              " takes class indices as targets, but the targets are ", targets.scalar_type(),
              "; store integer classes (or use --loss mse / bce_with_logits)");
  TORCH_CHECK(output.dim() >= 2 && targets.dim() == output.dim() - 1 &&
                  output.sizes().slice(0, output.dim() - 1) == targets.sizes(),
              "--loss ", loss.kind,
              " needs an output [N, C] against targets [N] (or [B, L, V] against [B, L]), "
              "but the model's output is ",
              Shape(output), " and the targets are ", Shape(targets),
              "; check the data's targets or choose another --loss");
  const int64_t classes = output.size(-1);
  at::Tensor labels = targets.reshape({-1}).to(at::kLong);
  // Ours, not ATen's "Target 108 is out of bounds.": which label, and the range.
  const at::Tensor outside =
      labels.ne(loss.ignore_index).logical_and(labels.lt(0).logical_or(labels.ge(classes)));
  if (outside.any().item<bool>()) {
    TORCH_CHECK(false, "--loss ", loss.kind, " got label ",
                labels.masked_select(outside)[0].item<int64_t>(), ", outside the model's ", classes,
                " classes (0 to ", classes - 1,
                "); check the data's targets, or mark labels to skip with --ignore-index");
  }
  return {output.reshape({-1, classes}), std::move(labels)};
}

void CheckSameShape(const LossOptions& loss, const at::Tensor& output, const at::Tensor& targets) {
  TORCH_CHECK(output.sizes() == targets.sizes(), "--loss ", loss.kind,
              " compares the output with targets of its shape, but the model's output is ",
              Shape(output), " and the targets are ", Shape(targets),
              "; check the data's targets or choose another --loss");
}

}  // namespace

LossOptions ParseLoss(const std::string& kind, int64_t ignore_index) {
  for (const char* name : {"cross_entropy", "nll", "mse", "bce_with_logits", "model", "sum"}) {
    if (kind == name) return LossOptions{kind, ignore_index};
  }
  TORCH_CHECK(false, "unknown --loss '", kind, "'; use ", kLossNames);
}

bool LossNeedsTargets(const LossOptions& loss) {
  return loss.kind != "model" && loss.kind != "sum";
}

at::Tensor LossInput(const LossOptions& loss, const std::vector<at::Tensor>& outputs) {
  for (const auto& o : outputs) {
    if (!o.defined() || !at::isFloatingType(o.scalar_type())) continue;
    if (loss.kind != "model" || o.dim() == 0) return o;
  }
  TORCH_CHECK(loss.kind != "model",
              "--loss model needs the model to return its loss (a 0-dim tensor), and it "
              "returns none; give the model its labels so that it computes one, or choose --loss ",
              kLossNames);
  TORCH_CHECK(false, "the model returns no floating-point tensor to compute the loss from");
}

at::Tensor ComputeLoss(const LossOptions& loss, const at::Tensor& output,
                       const at::Tensor& targets) {
  if (loss.kind == "model") return output;
  if (loss.kind == "sum") return output.sum();
  TORCH_CHECK(targets.defined(), "--loss ", loss.kind, " needs targets, and the data has none");
  if (ClassLoss(loss)) {
    auto [logits, classes] = AsClassProblem(loss, output, targets);
    return loss.kind == "cross_entropy"
               ? at::cross_entropy_loss(logits, classes, {}, at::Reduction::Mean, loss.ignore_index)
               : at::nll_loss(logits, classes, {}, at::Reduction::Mean, loss.ignore_index);
  }
  CheckSameShape(loss, output, targets);
  at::Tensor want = targets.to(output.scalar_type());
  if (loss.kind == "mse") return at::mse_loss(output, want);
  return at::binary_cross_entropy_with_logits(output, want);
}

LossShares::LossShares(LossOptions loss, at::Tensor targets)
    : loss_(std::move(loss)), targets_(std::move(targets)) {
  if (!LossNeedsTargets(loss_)) return;
  TORCH_CHECK(targets_.defined(), "--loss ", loss_.kind, " needs targets, and the data has none");
  count_ = ClassLoss(loss_) ? targets_.ne(loss_.ignore_index).sum().item<double>()
                            : static_cast<double>(targets_.numel());
}

at::Tensor LossShares::Share(const at::Tensor& output, int64_t offset, int64_t rows,
                             int64_t batch) const {
  if (loss_.kind == "sum") return output.sum();
  if (loss_.kind == "model")
    return output * (static_cast<double>(rows) / static_cast<double>(batch));
  const at::Tensor targets = targets_.narrow(0, offset, rows);
  at::Tensor sum;
  if (ClassLoss(loss_)) {
    auto [logits, classes] = AsClassProblem(loss_, output, targets);
    sum = loss_.kind == "cross_entropy"
              ? at::cross_entropy_loss(logits, classes, {}, at::Reduction::Sum, loss_.ignore_index)
              : at::nll_loss(logits, classes, {}, at::Reduction::Sum, loss_.ignore_index);
  } else {
    CheckSameShape(loss_, output, targets);
    at::Tensor want = targets.to(output.scalar_type());
    sum = loss_.kind == "mse"
              ? at::mse_loss(output, want, at::Reduction::Sum)
              : at::binary_cross_entropy_with_logits(output, want, {}, {}, at::Reduction::Sum);
  }
  return sum / count_;  // 0/0 is NaN, as the mean over no counted targets is
}

void AccumulateEval(const LossOptions& loss, const at::Tensor& output, const at::Tensor& targets,
                    EvalTotals& totals) {
  at::Tensor value = ComputeLoss(loss, output, targets);
  if (!ClassLoss(loss)) {
    const double n = output.dim() == 0 ? 1.0 : static_cast<double>(output.size(0));
    totals.loss_sum += value.item<double>() * n;
    totals.weight += n;
    return;
  }
  auto [logits, classes] = AsClassProblem(loss, output, targets);
  at::Tensor counted = classes.ne(loss.ignore_index);
  const double n = counted.sum().item<double>();
  totals.loss_sum += n > 0 ? value.item<double>() * n : 0.0;
  totals.weight += n;
  totals.language_model = output.dim() >= 3;
  if (!totals.language_model) {
    totals.correct += logits.argmax(1).eq(classes).logical_and(counted).sum().item<int64_t>();
    totals.classified += static_cast<int64_t>(n);
  }
}

}  // namespace gpipe
