#include "runtime/trainer.h"

#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/data/dataloader.h>
#include <torch/data/samplers/sequential.h>
#include <torch/serialize/archive.h>

#include "runtime/peer_group.h"
#include "runtime/rng_state.h"

namespace gpipe {
namespace {

std::vector<c10::IValue> AsArguments(const DataBatch& batch) {
  return std::vector<c10::IValue>(batch.inputs.begin(), batch.inputs.end());
}

// An epoch's last batch may have fewer examples than the pipeline has
// micro-batches: it runs with one example per micro-batch.
// The most micro-batches, at most `rows`, that train_step's schedule can run.
std::optional<int64_t> FittingChunks(const Pipeline& pipe, int64_t rows) {
  for (int64_t m = rows; m >= 1; --m) {
    if (!pipe.ScheduleMisfit(m)) return m;
  }
  return std::nullopt;
}

class ChunksForBatch {
 public:
  // `training`: the count must also suit train_step's schedule (the largest
  // that does; the Trainer checked at the start that one exists).
  ChunksForBatch(Pipeline& pipe, const DataBatch& batch, bool training)
      : pipe_(pipe), chunks_(pipe.chunks()) {
    const int64_t rows = batch.inputs.at(0).dim() > 0 ? batch.inputs.at(0).size(0) : chunks_;
    if (rows >= chunks_) return;
    pipe_.set_chunks(training ? FittingChunks(pipe_, rows).value_or(rows) : rows);
  }
  ~ChunksForBatch() { pipe_.set_chunks(chunks_); }

 private:
  Pipeline& pipe_;
  int64_t chunks_;
};

// torch::data's loader over one pass of `order`, reading one batch ahead.
auto MakeLoader(std::shared_ptr<const DataSource> source, std::vector<int64_t> order,
                int64_t batch_size) {
  const size_t n = order.size();
  return torch::data::make_data_loader(
      DataSourceDataset(std::move(source), std::move(order)),
      torch::data::samplers::SequentialSampler(n),
      torch::data::DataLoaderOptions(static_cast<size_t>(batch_size)).workers(1));
}

}  // namespace

Trainer::Trainer(Pipeline& pipe, std::shared_ptr<const DataSource> train,
                 std::shared_ptr<const DataSource> eval, TrainerOptions options)
    : pipe_(pipe),
      train_(std::move(train)),
      eval_(std::move(eval)),
      train_fingerprint_(DataFingerprint(*train_)),
      options_(std::move(options)) {
  TORCH_CHECK(options_.batch_size >= 1, "--batch-size must be at least 1");
  TORCH_CHECK(options_.grad_accum >= 1, "--grad-accum must be at least 1");
  TORCH_CHECK(options_.epochs >= 1, "--epochs must be at least 1");
  TORCH_CHECK(!options_.steps || *options_.steps >= 1, "--steps must be at least 1");
  TORCH_CHECK(options_.eval_every >= 0, "--eval-every must not be negative");
  TORCH_CHECK(!options_.clip_grad_norm || *options_.clip_grad_norm > 0,
              "--clip-grad-norm must be positive");
  TORCH_CHECK(train_->size() >= 1, "the training data has no examples");
  TORCH_CHECK(options_.batch_size >= pipe_.chunks(), "--batch-size ", options_.batch_size,
              " is smaller than the ", pipe_.chunks(),
              " micro-batches of the pipeline; use --batch-size ", pipe_.chunks(),
              " or more, or --chunks ", options_.batch_size);
  // A last batch with fewer rows than chunks runs as fewer micro-batches:
  // say now, not at the end of the first epoch, if the schedule cannot.
  const int64_t last_rows = train_->size() % options_.batch_size;
  if (last_rows > 0 && last_rows < pipe_.chunks() && !FittingChunks(pipe_, last_rows)) {
    TORCH_CHECK(false, "the last batch of each epoch has ", last_rows, " examples (",
                train_->size(), " % --batch-size ", options_.batch_size, "), too few for schedule ",
                pipe_.schedule(), ": ", *pipe_.ScheduleMisfit(last_rows),
                "; choose a --batch-size that leaves no remainder, or another schedule");
  }
  optimizer_ = MakeOptimizer(pipe_.parameters(), options_.optimizer);
  const int64_t steps_per_epoch =
      (batches_per_epoch() + options_.grad_accum - 1) / options_.grad_accum;
  total_steps_ = options_.steps ? *options_.steps : options_.epochs * steps_per_epoch;
  TORCH_CHECK(options_.schedule.decay_end.value_or(1) >= 1, "--lr-decay-steps must be at least 1");
  if (options_.schedule.decay_end) {
    const int64_t end = *options_.schedule.decay_end;
    const int64_t warmup = options_.schedule.warmup_steps;
    TORCH_CHECK(options_.schedule.kind != "constant", "--lr-decay-steps ", end,
                " ends a decay, and --lr-schedule constant has none; use --lr-schedule cosine or "
                "linear, or drop --lr-decay-steps");
    TORCH_CHECK(end > warmup, "--lr-decay-steps ", end,
                " ends the decay before the --warmup-steps ", warmup,
                " warm-up does; give --lr-decay-steps above ", warmup, ", or fewer --warmup-steps");
  }
  schedule_end_ = options_.schedule.decay_end.value_or(total_steps_);
}

int64_t Trainer::batches_per_epoch() const {
  return (train_->size() + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> Trainer::EpochOrder(int64_t epoch) const {
  const int64_t n = train_->size();
  if (!options_.shuffle) {
    at::Tensor order = at::arange(n, at::kLong);
    return std::vector<int64_t>(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + n);
  }
  // Its own generator: the order depends on the seed and the epoch only,
  // not on how many random numbers the model drew (dropout).
  auto generator =
      at::make_generator<at::CPUGeneratorImpl>(options_.seed + static_cast<uint64_t>(epoch));
  at::Tensor order = at::randperm(n, generator, at::kLong);
  return std::vector<int64_t>(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + n);
}

// torch.nn.utils.clip_grad_norm_'s rule over the gradients of every stage
// and, with several processes, every rank (each holds only its stages'
// parameters, so the squares are summed across ranks first).
std::optional<double> Trainer::ClipGradients() {
  if (!options_.clip_grad_norm) return std::nullopt;
  at::Tensor squares = at::zeros({1}, at::kDouble);
  std::vector<at::Tensor> grads;
  for (const auto& p : pipe_.parameters()) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
    squares += p.grad().detach().to(at::kDouble).pow(2).sum().cpu();
  }
  if (options_.peers)
    options_.peers->AllReduceSum(squares, "the gradient norm for --clip-grad-norm");
  const double norm = std::sqrt(squares.item<double>());
  const double coefficient = *options_.clip_grad_norm / (norm + 1e-6);
  if (coefficient < 1) {
    at::NoGradGuard no_grad;
    for (auto& g : grads) g.mul_(coefficient);
  }
  return norm;
}

int64_t Trainer::Run(const std::function<void(const StepReport&)>& on_step,
                     const std::function<void(const EvalReport&)>& on_eval,
                     const std::function<bool()>& stop) {
  pipe_.train();
  int64_t& step = step_;
  StepReport report;
  int64_t in_group = 0;  // mini-batches accumulated into the coming step
  auto start = std::chrono::steady_clock::now();
  // One optimizer step over the accumulated mini-batches; true when training is over.
  auto finish_step = [&](int64_t epoch) {
    if (in_group <
        options_.grad_accum) {  // an epoch's last, partial group: its mean, not a smaller sum
      at::NoGradGuard no_grad;
      const double rescale =
          static_cast<double>(options_.grad_accum) / static_cast<double>(in_group);
      for (auto& p : pipe_.parameters()) {
        if (p.grad().defined()) p.mutable_grad().mul_(rescale);
      }
      report.loss *= rescale;
    }
    in_group = 0;
    report.step = ++step;
    if (report.skipped) {  // the weights stay as they were; the schedule moves on
      report.total = total_steps_;
      report.epoch = epoch + 1;
      report.lr = LearningRateAt(options_.schedule, options_.optimizer.lr, step, schedule_end_);
      optimizer_->zero_grad();
      report.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      on_step(report);
      return step == total_steps_ || stop();
    }
    report.total = total_steps_;
    report.epoch = epoch + 1;
    report.lr = LearningRateAt(options_.schedule, options_.optimizer.lr, step, schedule_end_);
    report.grad_norm = ClipGradients();
    SetLearningRate(*optimizer_, report.lr);
    optimizer_->step();
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    on_step(report);
    const bool last = step == total_steps_;
    if (eval_ && (last || (options_.eval_every > 0 && step % options_.eval_every == 0)))
      on_eval(Evaluate(step));
    return last || stop();
  };
  for (; step < total_steps_; ++epoch_, batches_done_ = 0) {
    const int64_t epoch = epoch_;
    std::vector<int64_t> order = EpochOrder(epoch);  // from where a resumed run stopped
    order.erase(order.begin(),
                order.begin() + std::min<int64_t>(batches_done_ * options_.batch_size,
                                                  static_cast<int64_t>(order.size())));
    if (order.empty()) continue;
    auto loader = MakeLoader(train_, std::move(order), options_.batch_size);
    for (DataBatch& batch : *loader) {
      if (in_group == 0) {
        optimizer_->zero_grad();
        report = StepReport{};
        start = std::chrono::steady_clock::now();
      }
      const double scale = 1.0 / static_cast<double>(options_.grad_accum);
      ChunksForBatch chunks(pipe_, batch, true);
      const LossShares shares(options_.loss, batch.targets);
      // Each micro-batch's share, kept (unsynchronized) to name a NaN's source.
      std::mutex shares_mutex;
      std::map<size_t, std::pair<MicroBatchRows, at::Tensor>> micro_losses;
      // Draws keyed by the mini-batch's place in the run: a resumed run draws the same.
      pipe_.set_draw_step(static_cast<uint64_t>(epoch * batches_per_epoch() + batches_done_));
      double loss =
          pipe_.train_step(AsArguments(batch),
                           [&](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
                             at::Tensor share = shares.Share(LossInput(options_.loss, outputs),
                                                             rows.offset, rows.size, rows.batch) *
                                                scale;
                             std::lock_guard<std::mutex> lock(shares_mutex);
                             micro_losses[rows.index] = {rows, share.detach()};
                             return share;
                           });
      if (!std::isfinite(loss)) {
        std::ostringstream where;
        where << "the loss";
        for (const auto& [index, entry] : micro_losses) {
          const double value = entry.second.item<double>() / scale;
          if (std::isfinite(value)) continue;
          where << " of micro-batch " << index << " (rows " << entry.first.offset << "-"
                << entry.first.offset + entry.first.size - 1 << ")";
          loss = value;
          break;
        }
        if (options_.grad_accum > 1) where << " of mini-batch " << in_group + 1;
        where << " is " << (std::isnan(loss) ? "NaN" : loss > 0 ? "+Inf" : "-Inf");
        TORCH_CHECK(options_.skip_nonfinite, "step ", step + 1, ": ", where.str(),
                    "; the weights were not updated. Lower --lr, clip with --clip-grad-norm, skip "
                    "such steps with --skip-nonfinite, or find the first stage producing NaN/Inf "
                    "with --detect-anomaly");
        if (!report.skipped) report.skipped = where.str();
      }
      if (!report.skipped) report.loss += loss;
      report.examples += batch.inputs.at(0).size(0);
      ++batches_done_;
      if (++in_group == options_.grad_accum && finish_step(epoch)) return step;
    }
    if (in_group > 0 && finish_step(epoch)) return step;
  }
  return step;
}

namespace {
// Saved with the options, compared apart: older checkpoints lack it.
constexpr const char* kDataFingerprint = "training data fingerprint";
}  // namespace

std::map<std::string, std::string> Trainer::ResumeOptions() const {
  const OptimizerOptions& o = options_.optimizer;
  auto number = [](double x) {
    std::ostringstream text;
    text.precision(17);
    text << x;
    return text.str();
  };
  std::map<std::string, std::string> options{
      {"--optimizer", o.name},
      {"--lr", number(o.lr)},
      {"--momentum", number(o.momentum)},
      {"--nesterov", o.nesterov ? "on" : "off"},
      {"--beta1", number(o.beta1)},
      {"--beta2", number(o.beta2)},
      {"--weight-decay", o.weight_decay ? number(*o.weight_decay) : "default"},
      {"--loss", options_.loss.kind},
      {"--ignore-index", std::to_string(options_.loss.ignore_index)},
      {"--batch-size", std::to_string(options_.batch_size)},
      {"--grad-accum", std::to_string(options_.grad_accum)},
      {"--seed", std::to_string(options_.seed)},
      {"shuffling", options_.shuffle ? "on" : "off"},
      {"--lr-schedule", options_.schedule.kind},
      {"--warmup-steps", std::to_string(options_.schedule.warmup_steps)},
      {"--clip-grad-norm", options_.clip_grad_norm ? number(*options_.clip_grad_norm) : "off"},
      {"training examples", std::to_string(train_->size())},
  };
  // A decaying schedule's rates depend on where it ends: a continuation that
  // ends elsewhere would not be the run it continues.
  if (options_.schedule.kind != "constant")
    options["--lr-decay-steps"] = std::to_string(schedule_end_);
  return options;
}

TrainingState Trainer::Capture() const {
  TrainingState state;
  state.step = step_;
  state.epoch = epoch_;
  state.batches_done = batches_done_;
  torch::serialize::OutputArchive archive;
  optimizer_->save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  state.optimizer = bytes.str();
  state.cpu_rng = CaptureRngState(c10::Device(c10::kCPU)).cpu;
  state.options = ResumeOptions();
  state.options[kDataFingerprint] = train_fingerprint_;
  return state;
}

void Trainer::Restore(const TrainingState& state, const std::string& checkpoint) {
  if (auto mismatch = DescribeOptionMismatch(state.options, ResumeOptions(), checkpoint))
    TORCH_CHECK(false, *mismatch);
  // Checkpoints written before the fingerprint was saved carry none: accepted.
  auto saved_data = state.options.find(kDataFingerprint);
  TORCH_CHECK(saved_data == state.options.end() || saved_data->second == train_fingerprint_,
              "checkpoint '", checkpoint,
              "' was trained on other data (the training examples' "
              "fingerprint was ",
              saved_data->second, ", this data's is ", train_fingerprint_,
              ": another file, or the same one rewritten); resume with the data it was trained "
              "on, or train afresh from it without --resume");
  TORCH_CHECK(state.step < total_steps_, "checkpoint '", checkpoint, "' has done ", state.step,
              " steps already, and this run ends at step ", total_steps_,
              "; give a larger --steps (it counts the "
              "whole run's steps) or more --epochs");
  try {
    torch::serialize::InputArchive archive;
    std::istringstream bytes(state.optimizer);
    archive.load_from(bytes);
    optimizer_->load(archive);
  } catch (const std::exception& e) {  // c10::Error, or the unpickler's std::out_of_range
    auto* error = dynamic_cast<const c10::Error*>(&e);
    TORCH_CHECK(false, "checkpoint '", checkpoint,
                "': its optimizer state does not fit this model's parameters (",
                error ? error->what_without_backtrace() : e.what(),
                "); resume with the artifact it was saved from");
  }

  RngState rng;
  rng.cpu = state.cpu_rng;
  RestoreRngState(rng);
  step_ = state.step;
  epoch_ = state.epoch;
  batches_done_ = state.batches_done;
}

EvalReport Trainer::Evaluate(int64_t step) {
  TORCH_CHECK(eval_, "there is no evaluation data; give --eval-fraction or --eval-data");
  const bool was_training = pipe_.is_training();
  pipe_.eval();
  at::NoGradGuard no_grad;
  EvalTotals totals;
  std::vector<int64_t> order(static_cast<size_t>(eval_->size()));
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
  auto loader = MakeLoader(eval_, order, options_.batch_size);
  EvalReport report;
  report.step = step;
  for (DataBatch& batch : *loader) {
    ChunksForBatch chunks(pipe_, batch, false);
    std::vector<at::Tensor> outputs = pipe_.forward(AsArguments(batch));
    report.examples += batch.inputs.at(0).size(0);
    if (outputs.empty()) continue;  // another rank holds the outputs
    AccumulateEval(options_.loss, LossInput(options_.loss, outputs), batch.targets, totals);
  }
  pipe_.train(was_training);
  if (options_.peers) {  // only the rank holding the outputs has counted: share its sums with every
                         // rank
    at::Tensor sums =
        at::tensor({totals.loss_sum, totals.weight, static_cast<double>(totals.correct),
                    static_cast<double>(totals.classified), totals.language_model ? 1.0 : 0.0},
                   at::kDouble);
    options_.peers->AllReduceSum(sums, "the evaluation after step " + std::to_string(step));
    const double* v = sums.data_ptr<double>();
    totals.loss_sum = v[0];
    totals.weight = v[1];
    totals.correct = static_cast<int64_t>(v[2]);
    totals.classified = static_cast<int64_t>(v[3]);
    totals.language_model = v[4] > 0;
  }
  report.loss = totals.weight > 0 ? totals.loss_sum / totals.weight : 0;
  if (totals.classified > 0)
    report.accuracy = static_cast<double>(totals.correct) / static_cast<double>(totals.classified);
  if (totals.language_model) report.perplexity = std::exp(report.loss);
  return report;
}

}  // namespace gpipe
