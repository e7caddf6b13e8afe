#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "runtime/artifact.h"
#include "runtime/checkpoint_mode.h"
#include "runtime/manifest.h"
#include "runtime/task_trace.h"

namespace gpipe {

struct PipelineCore;
class PeerGroup;
class PipelineRun;

// Overrides for what the artifact's manifest says.
struct PipelineOptions {
  std::optional<int64_t> chunks;
  std::optional<CheckpointMode> checkpoint;
  std::vector<std::string> devices;  // one per stage; empty = as compiled
  // Intra-op threads of each CPU stage's worker: 0 = the machine's cores
  // divided among the CPU stages (at least 1); -1 = LibTorch's default.
  int threads_per_stage = 0;
  // Check every stage output (forward) and every gradient a stage hands back
  // (backward) for NaN/Inf; the error names the first stage and micro-batch
  // in schedule order that produced one. Costs one reduction per tensor.
  bool detect_anomaly = false;
  // Ablation (bench/ablation.sh): every stage on one worker thread, as
  // PyTorch's Pipe runs CPU partitions, instead of one per stage/device.
  bool one_worker = false;
  // In one process of CPU stages whose threads outnumber the cores, only as
  // many worker threads as fit run, each taking any stage's next ready task
  // (stage_placement.h); false (an ablation, gpipe-bench +thread-per-stage):
  // every stage's thread runs, the operating system sharing the cores.
  bool share_cpu_threads = true;
  // Linear layers' weight gradients: one product per group of micro-batches
  // after their backwards (deferred_weight_grads.h); false (an ablation,
  // gpipe-run --per-micro-batch-weight-gradients): each backward adds its own.
  bool batch_weight_gradients = true;
  // Ablation (bench/gpu.sh): CUDA copies run on the compute streams instead
  // of one copy stream per device (CopyStreams). No effect without CUDA.
  bool copy_streams = true;
  // Several processes (see PeerGroup and RankPlan): this process's group;
  // it loads and runs only its own stages. `ranks`: the rank of each stage
  // (empty = the manifest's assignment, else one stage per rank).
  std::shared_ptr<PeerGroup> peers;
  std::vector<int> ranks;
  // The order of work in train_step (schedule_ir.h): gpipe, 1f1b,
  // interleaved-1f1b (with `virtual_stages` stages per worker), zb-h1, or a
  // CSV file of actions (schedule_csv.h) planned for `chunks` micro-batches.
  // Schedules other than gpipe need the loss per micro-batch.
  std::optional<std::string> schedule;
  std::optional<size_t> virtual_stages;
};

// Computes the loss from the model's outputs (a scalar tensor).
using LossFunction = std::function<at::Tensor(const std::vector<at::Tensor>& outputs)>;

// Which rows of the mini-batch a micro-batch holds (Scatter's split).
struct MicroBatchRows {
  size_t index = 0;
  int64_t offset = 0;
  int64_t size = 0;
  int64_t batch = 0;  // the mini-batch's rows
};
// The loss of one micro-batch from its rows of the model's outputs (an output
// without the batch's rows in dim 0 is given whole), as its share of the
// mini-batch's loss: the shares must add up to the mini-batch's loss, so that
// their gradients are the mini-batch's (LossShares in training_loss.h does
// this for gpipe-run's losses). Schedules that run a micro-batch's backward
// before the others' forward need the loss in this form.
using MicroBatchLossFunction =
    std::function<at::Tensor(const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs)>;

// A pipelined model loaded from a gpipe artifact. forward() splits the batch
// into micro-batches and runs them through the stages on worker threads
// (GPipe schedule); its outputs are autograd-connected, so loss.backward()
// runs the pipelined backward and fills the parameters' .grad. The function
// computed, outputs and gradients, is the original model's.
class Pipeline {
 public:
  static Pipeline load(const std::string& path, const PipelineOptions& options = {});

  at::Tensor forward(const at::Tensor& input);  // single-input, single-output models
  // The model's tensor outputs, flat, in order (an undefined tensor where the
  // model returns None). Arguments are the original forward's, by position
  // and by name; omitted ones take their defaults. An input whose shape or
  // dtype differs from the compiled sample and makes the model fail is named
  // in a one-line error. With several processes, every rank calls forward
  // with the same inputs (under NoGradGuard: train with train_step); the rank
  // holding the model outputs (holds_outputs()) gets them, the others an
  // empty vector.
  std::vector<at::Tensor> forward(const std::vector<c10::IValue>& args, const Kwargs& kwargs = {});

  // Like the model itself: the result in the original structure (tensor,
  // tuple, list, dict, None). Its tensors are forward()'s, so gradients flow
  // from any of them.
  c10::IValue operator()(const std::vector<c10::IValue>& args, const Kwargs& kwargs = {});

  // One training step's forward and backward: loss(forward(inputs)).backward(),
  // filling the parameters' .grad. With several processes, every rank calls
  // it with the same inputs; `loss` runs on the rank holding the outputs and
  // every rank gets the loss's value back.
  double train_step(const std::vector<c10::IValue>& inputs, const LossFunction& loss);
  // The same with the loss computed per micro-batch: the sum of the shares.
  double train_step(const std::vector<c10::IValue>& inputs, const MicroBatchLossFunction& loss);

  // The original forward's arguments, as recorded.
  const std::vector<ForwardArgument>& signature() const;

  // Trainable parameters, in stage order; names are the original model's.
  // With several processes: those of this rank's stages only.
  std::vector<at::Tensor> parameters() const;
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, at::Tensor>> named_buffers() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const;

  // Writes the current weights as an artifact, atomically (see WriteArtifact).
  // With several processes, a collective call: rank 0 gathers every stage
  // and writes one artifact that loads back in a single process.
  void save(const std::string& path) const;
  // The same, with extra records of this process beside the stages (a
  // trainer's state). One process only: each rank's would differ.
  void save(const std::string& path, const std::vector<ArtifactRecord>& extra) const;

  // Random numbers are drawn by key (keyed_random.h): (seed, step,
  // micro-batch, op), the seed being the one torch::manual_seed set. This is
  // the step keying the next forward or train_step; each call advances it by
  // one (on every rank alike). The Trainer sets it to each mini-batch's place
  // in the run, so that a resumed run draws what the uninterrupted one did.
  uint64_t draw_step() const;
  void set_draw_step(uint64_t step);

  // Task timing (see TaskTrace): off by default.
  void set_tracing(bool on);
  std::vector<TaskRecord> take_trace();
  std::vector<std::string> worker_names() const;

  size_t num_stages() const;
  size_t num_local_stages() const;
  bool holds_outputs() const;
  int64_t chunks() const;
  void set_chunks(int64_t chunks);
  CheckpointMode checkpoint() const;
  void set_checkpoint(CheckpointMode mode);
  const std::string& schedule() const;
  // Why train_step's schedule cannot run `micro_batches` micro-batches (e.g.
  // interleaved-1f1b groups them by the worker count; a CSV plan is for one
  // count), or nullopt when it can.
  std::optional<std::string> ScheduleMisfit(int64_t micro_batches) const;
  const Manifest& manifest() const;

 private:
  using BatchLoss = std::function<at::Tensor(const std::vector<at::Tensor>& outputs,
                                             const std::vector<int64_t>& micro_batch_sizes)>;
  double TrainStep(const std::vector<c10::IValue>& inputs, const BatchLoss& loss);
  std::shared_ptr<PipelineRun> StartRun(std::vector<c10::IValue> inputs, bool needs_grad);
  void CommitDeferredBatchNorm();
  explicit Pipeline(std::shared_ptr<PipelineCore> core);
  std::shared_ptr<PipelineRun> RunForward(std::vector<c10::IValue> inputs, bool needs_grad,
                                          std::vector<at::Tensor>& outputs);
  std::vector<std::pair<std::string, at::Tensor>> named_tensors(bool buffers) const;
  std::shared_ptr<PipelineCore> core_;
};

}  // namespace gpipe
