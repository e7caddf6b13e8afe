#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "runtime/data_source.h"
#include "runtime/optimizer_setup.h"
#include "runtime/pipeline.h"
#include "runtime/training_loss.h"
#include "runtime/training_state.h"

namespace gpipe {

class PeerGroup;

struct TrainerOptions {
  int64_t batch_size = 32;
  std::optional<int64_t> steps;  // optimizer steps in all; unset: `epochs` passes over the data
  int64_t epochs = 1;
  uint64_t seed = 0;  // the data order of epoch e is a permutation drawn from seed + e
  bool shuffle = true;
  int64_t grad_accum = 1;                // mini-batches per optimizer step
  std::optional<double> clip_grad_norm;  // over every stage (and rank) together
  int64_t eval_every = 0;                // optimizer steps between evaluations (0: only at the end)
  // A NaN/Inf loss stops the run with an error naming the step and the
  // micro-batch; with this set, that step's update is skipped instead (its
  // gradients dropped, the weights untouched) and training goes on.
  bool skip_nonfinite = false;
  LossOptions loss;
  OptimizerOptions optimizer;
  LrSchedule schedule;
  std::shared_ptr<PeerGroup> peers;  // several processes: the gradient norm spans every rank
};

struct StepReport {
  int64_t step = 0, total = 0, epoch = 0;
  double loss = 0;                  // mean over the step's mini-batches
  double lr = 0;                    // the rate this step ran with
  std::optional<double> grad_norm;  // before clipping (with clip_grad_norm)
  int64_t examples = 0;
  double seconds = 0;
  // With skip_nonfinite: why this step's update was skipped ("the loss of
  // micro-batch 1 (rows 4-7) of mini-batch 1 is nan").
  std::optional<std::string> skipped;
};

struct EvalReport {
  int64_t step = 0;
  int64_t examples = 0;
  double loss = 0;
  std::optional<double> accuracy;    // classification
  std::optional<double> perplexity;  // language models
};

// Trains a pipeline on a data source with a LibTorch optimizer: mini-batches
// from torch::data's DataLoader (one background worker, so the next batch is
// read while the pipeline runs), each through Pipeline::train_step with the loss computed per
// micro-batch (LossShares), a
// learning-rate schedule, gradient accumulation and clipping, and periodic
// evaluation on held-out data in eval mode without gradients. An uneven last
// batch of an epoch is trained on, not dropped.
class Trainer {
 public:
  Trainer(Pipeline& pipe, std::shared_ptr<const DataSource> train,
          std::shared_ptr<const DataSource> eval, TrainerOptions options);

  int64_t total_steps() const { return total_steps_; }
  int64_t batches_per_epoch() const;

  // Trains to total_steps(); `stop` is asked after every step (e.g. Ctrl-C).
  // Returns the steps done.
  int64_t Run(const std::function<void(const StepReport&)>& on_step,
              const std::function<void(const EvalReport&)>& on_eval,
              const std::function<bool()>& stop);

  EvalReport Evaluate(int64_t step);
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  int64_t step() const { return step_; }

  // The run's state after the last step, for a checkpoint; Restore() makes a
  // fresh Trainer (same options, same data) continue from it exactly. A
  // state saved under other options is refused, naming the first difference.
  TrainingState Capture() const;
  void Restore(const TrainingState& state, const std::string& checkpoint);
  // What a continuation must share with the run it continues.
  std::map<std::string, std::string> ResumeOptions() const;

 private:
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  std::optional<double> ClipGradients();

  Pipeline& pipe_;
  std::shared_ptr<const DataSource> train_, eval_;
  std::string train_fingerprint_;  // DataFingerprint(*train_), saved with the training state
  TrainerOptions options_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int64_t total_steps_ = 0;
  int64_t schedule_end_ = 0;  // where cosine/linear end: --lr-decay-steps, else total_steps_
  // Where the run stands: optimizer steps done, and the next mini-batch's epoch and index in it.
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t batches_done_ = 0;
};

}  // namespace gpipe
