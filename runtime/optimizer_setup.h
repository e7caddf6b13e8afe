#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

namespace gpipe {

// LibTorch's optimizers as gpipe-run --optimizer names them, over a
// pipeline's parameters (Pipeline::parameters() are the stages' own tensors).
struct OptimizerOptions {
  std::string name = "sgd";  // sgd, adam or adamw
  double lr = 0.01;
  double momentum = 0;                            // sgd
  bool nesterov = false;                          // sgd (needs momentum)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  std::optional<double> weight_decay;             // default: 0, and 0.01 for adamw as in PyTorch
};

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const std::vector<at::Tensor>& parameters,
                                                       const OptimizerOptions& options);

// The learning rate of optimizer step `step` (1-based) of `total`: a linear
// warm-up from 0 over `warmup` steps, then constant, cosine (to 0 at `total`)
// or linear (to 0 at `total`) decay, as Hugging Face's schedules of those names.
struct LrSchedule {
  std::string kind = "constant";  // constant, cosine or linear
  int64_t warmup_steps = 0;
  // The step at which cosine and linear reach their end (--lr-decay-steps);
  // unset: the run's last step. A run that will be stopped early and resumed
  // to a longer --steps sets it, so that its rates are those of the whole run.
  std::optional<int64_t> decay_end;
};
LrSchedule ParseLrSchedule(const std::string& kind, int64_t warmup_steps);
double LearningRateAt(const LrSchedule& schedule, double base_lr, int64_t step, int64_t total);
void SetLearningRate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace gpipe
