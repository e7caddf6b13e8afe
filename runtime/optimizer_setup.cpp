#include "runtime/optimizer_setup.h"

#include <algorithm>
#include <cmath>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace gpipe {

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const std::vector<at::Tensor>& parameters,
                                                       const OptimizerOptions& o) {
  TORCH_CHECK(o.lr > 0 && std::isfinite(o.lr), "--lr ", o.lr, " must be a positive number");
  TORCH_CHECK(o.weight_decay.value_or(0) >= 0, "--weight-decay ", *o.weight_decay,
              " must not be negative");
  if (o.name == "sgd") {
    TORCH_CHECK(!o.nesterov || o.momentum > 0,
                "--nesterov needs --momentum above 0 (as in torch.optim.SGD)");
    return std::make_unique<torch::optim::SGD>(parameters,
                                               torch::optim::SGDOptions(o.lr)
                                                   .momentum(o.momentum)
                                                   .nesterov(o.nesterov)
                                                   .weight_decay(o.weight_decay.value_or(0)));
  }
  TORCH_CHECK(o.momentum == 0 && !o.nesterov, "--momentum and --nesterov are for --optimizer sgd; ",
              o.name, " has --beta1/--beta2");
  TORCH_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
              "--beta1 and --beta2 must be in [0, 1)");
  if (o.name == "adam") {
    return std::make_unique<torch::optim::Adam>(parameters,
                                                torch::optim::AdamOptions(o.lr)
                                                    .betas({o.beta1, o.beta2})
                                                    .eps(o.eps)
                                                    .weight_decay(o.weight_decay.value_or(0)));
  }
  if (o.name == "adamw") {
    return std::make_unique<torch::optim::AdamW>(parameters,
                                                 torch::optim::AdamWOptions(o.lr)
                                                     .betas({o.beta1, o.beta2})
                                                     .eps(o.eps)
                                                     .weight_decay(o.weight_decay.value_or(0.01)));
  }
  TORCH_CHECK(false, "unknown --optimizer '", o.name, "'; use sgd, adam or adamw");
}

LrSchedule ParseLrSchedule(const std::string& kind, int64_t warmup_steps) {
  TORCH_CHECK(kind == "constant" || kind == "cosine" || kind == "linear", "unknown --lr-schedule '",
              kind, "'; use constant, cosine or linear");
  TORCH_CHECK(warmup_steps >= 0, "--warmup-steps must not be negative");
  return LrSchedule{kind, warmup_steps, std::nullopt};
}

double LearningRateAt(const LrSchedule& s, double base_lr, int64_t step, int64_t total) {
  // Step k runs with the rate of k - 1 completed steps, as LambdaLR after k - 1 scheduler.step()
  // calls.
  const double done = static_cast<double>(step - 1);
  if (done < static_cast<double>(s.warmup_steps))
    return base_lr * done / static_cast<double>(s.warmup_steps);
  if (s.kind == "constant") return base_lr;
  const double decay_steps = static_cast<double>(std::max<int64_t>(1, total - s.warmup_steps));
  const double progress = std::min(1.0, (done - static_cast<double>(s.warmup_steps)) / decay_steps);
  if (s.kind == "linear") return base_lr * (1.0 - progress);
  return base_lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace gpipe
