#include "cli/train_on_data.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/artifact.h"
#include "runtime/trainer.h"
#include "runtime/training_state.h"

namespace po = boost::program_options;

namespace gpipe {

void AddDataTrainingOptions(po::options_description& options, DataTrainingCli& cli) {
  options.add_options()(
      "data", po::value(&cli.data),
      "--train on this data: a directory of inputs.npy + targets.npy (streamed; inputs_0.npy, "
      "inputs_1.npy, ... for several inputs), a .pt file of torch.save({\"inputs\": X, "
      "\"targets\": Y}), "
      "or a .bin token file with --seq-len")(
      "batch-size", po::value(&cli.batch_size)->default_value(32),
      "--data: examples per mini-batch")("epochs", po::value(&cli.epochs)->default_value(1),
                                         "--data: passes over the data (unless --steps)")(
      "seq-len", po::value(&cli.seq_len), "--data FILE.bin: tokens per example")(
      "token-dtype", po::value(&cli.token_dtype)->default_value("uint16"),
      "--data FILE.bin: uint16 or uint32")(
      "eval-fraction", po::value(&cli.eval_fraction)->default_value(0),
      "--data: hold out this last fraction of the data for evaluation (never trained on)")(
      "eval-data", po::value(&cli.eval_data), "--data: evaluate on this data instead")(
      "eval-every", po::value(&cli.eval_every)->default_value(0),
      "--data: evaluate every K steps (and at the end)")(
      "ignore-index", po::value(&cli.ignore_index)->default_value(-100),
      "--loss cross_entropy/nll: targets of this value count for nothing")(
      "optimizer", po::value(&cli.optimizer)->default_value("sgd"), "--data: sgd, adam or adamw")(
      "momentum", po::value(&cli.momentum)->default_value(0), "--optimizer sgd: momentum")(
      "nesterov", "--optimizer sgd: Nesterov momentum")(
      "beta1", po::value(&cli.beta1)->default_value(0.9, "0.9"), "--optimizer adam/adamw")(
      "beta2", po::value(&cli.beta2)->default_value(0.999, "0.999"), "--optimizer adam/adamw")(
      "weight-decay", po::value(&cli.weight_decay),
      "--data: weight decay (default 0; 0.01 for adamw)")(
      "lr-schedule", po::value(&cli.lr_schedule)->default_value("constant"),
      "--data: constant, cosine or linear")("warmup-steps",
                                            po::value(&cli.warmup_steps)->default_value(0),
                                            "--data: linear warm-up from 0 over K steps")(
      "lr-decay-steps", po::value(&cli.lr_decay_steps),
      "--lr-schedule cosine/linear: the step at which the decay ends (default: the run's last "
      "step); set it to the final --steps when a run will be stopped and resumed further")(
      "clip-grad-norm", po::value(&cli.clip_grad_norm),
      "--data: clip the global gradient norm to this")("grad-accum",
                                                       po::value(&cli.grad_accum)->default_value(1),
                                                       "--data: mini-batches per optimizer step")(
      "no-shuffle", "--data: read the data in file order")(
      "skip-nonfinite",
      "--data: when a step's loss is NaN or Inf, skip its update (weights untouched) and go on, "
      "instead of stopping")("log-every", po::value(&cli.log_every)->default_value(1),
                             "--data: print every K-th step (and the last)")(
      "metrics-out", po::value(&cli.metrics_out),
      "--data: write one JSON object per logged step (and evaluation) to this .jsonl file; "
      "plot it with scripts/plot_metrics.py")(
      "resume",
      "--data: the artifact is a checkpoint (--save) of a run with these options: continue it, "
      "with its optimizer state, data position and random numbers (--steps counts the whole run)");
}

namespace {

std::shared_ptr<const DataSource> Open(const std::string& path, const DataTrainingCli& cli,
                                       const po::variables_map& vm) {
  DataOptions options;
  if (vm.count("seq-len")) options.seq_len = cli.seq_len;
  TORCH_CHECK(cli.token_dtype == "uint16" || cli.token_dtype == "uint32", "--token-dtype '",
              cli.token_dtype, "': use uint16 or uint32");
  options.token_bits = cli.token_dtype == "uint16" ? 16 : 32;
  return OpenDataSource(path, options);
}

std::string Percent(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * x);
  return text;
}

std::string Duration(double seconds) {
  const auto s = static_cast<long long>(std::llround(seconds));
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  } else {
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  }
  return text;
}

// --metrics-out: one JSON line per logged step, with the evaluation of that
// step merged in; each line is written whole and flushed, so the file can be
// read (and plotted) while the run goes on. A resumed run appends.
class MetricsFile {
 public:
  MetricsFile(const std::string& path, bool append) : path_(path) {
    if (path.empty()) return;
    file_.open(path, append ? std::ios::app : std::ios::trunc);
    TORCH_CHECK(file_.good(), "cannot write --metrics-out '", path,
                "'; check that its directory exists and is writable");
  }
  ~MetricsFile() { Flush(); }
  void Step(const StepReport& r) {
    Flush();
    pending_ = {{"step", r.step},
                {"epoch", r.epoch},
                {"loss", r.loss},
                {"lr", r.lr},
                {"samples_per_s", static_cast<double>(r.examples) / r.seconds}};
    if (r.grad_norm) pending_["grad_norm"] = *r.grad_norm;
  }
  void Eval(const StepReport& last, const EvalReport& r) {
    if (pending_.is_null() || pending_["step"] != r.step) Step(last);
    pending_["eval_loss"] = r.loss;
    if (r.accuracy) pending_["eval_accuracy"] = *r.accuracy;
    if (r.perplexity) pending_["eval_perplexity"] = *r.perplexity;
  }
  void Flush() {
    if (pending_.is_null() || !file_.is_open()) return;
    file_ << pending_.dump() << '\n';
    file_.flush();
    pending_ = nullptr;
    if (!file_.good()) {
      // The metrics are a by-product: losing them must not lose the run's save.
      std::fprintf(stderr,
                   "gpipe-run: warning: writing --metrics-out '%s' failed (%s); training goes on "
                   "without it\n",
                   path_.c_str(), std::strerror(errno));
      file_.close();
    }
  }

 private:
  std::string path_;
  std::ofstream file_;
  nlohmann::json pending_;
};

}  // namespace

DataRunEnd TrainOnData(Pipeline& pipe, const DataTrainingCli& cli, const po::variables_map& vm,
                       double lr, std::optional<int64_t> steps, uint64_t seed,
                       std::shared_ptr<PeerGroup> peers, bool verbose,
                       const CheckpointCli& checkpoints, const std::function<bool(int64_t)>& stop) {
  TORCH_CHECK(cli.eval_fraction >= 0 && cli.eval_fraction < 1, "--eval-fraction ",
              cli.eval_fraction, " must be in [0, 1)");
  TORCH_CHECK(cli.eval_fraction == 0 || cli.eval_data.empty(),
              "give --eval-fraction or --eval-data, not both");
  auto all = Open(cli.data, cli, vm);
  std::shared_ptr<const DataSource> train = all, eval;
  if (cli.eval_fraction > 0) {
    const auto held_out =
        static_cast<int64_t>(std::ceil(cli.eval_fraction * static_cast<double>(all->size())));
    TORCH_CHECK(held_out < all->size(), "--eval-fraction ", cli.eval_fraction, " of ", all->size(),
                " examples leaves none to train on");
    train = SliceDataSource(all, 0, all->size() - held_out);
    eval = SliceDataSource(all, all->size() - held_out, all->size());
  } else if (!cli.eval_data.empty()) {
    eval = Open(cli.eval_data, cli, vm);
  }
  TrainerOptions options;
  options.batch_size = cli.batch_size;
  options.epochs = cli.epochs;
  options.steps = steps;
  options.seed = seed;
  options.shuffle = vm.count("no-shuffle") == 0;
  options.skip_nonfinite = vm.count("skip-nonfinite") > 0;
  options.grad_accum = cli.grad_accum;
  if (vm.count("clip-grad-norm")) options.clip_grad_norm = cli.clip_grad_norm;
  options.eval_every = cli.eval_every;
  options.loss = ParseLoss(vm["loss"].defaulted() ? "cross_entropy" : vm["loss"].as<std::string>(),
                           cli.ignore_index);
  options.optimizer.name = cli.optimizer;
  options.optimizer.lr = lr;
  options.optimizer.momentum = cli.momentum;
  options.optimizer.nesterov = vm.count("nesterov") > 0;
  options.optimizer.beta1 = cli.beta1;
  options.optimizer.beta2 = cli.beta2;
  if (vm.count("weight-decay")) options.optimizer.weight_decay = cli.weight_decay;
  options.schedule = ParseLrSchedule(cli.lr_schedule, cli.warmup_steps);
  if (vm.count("lr-decay-steps")) options.schedule.decay_end = cli.lr_decay_steps;
  const bool distributed = peers != nullptr;
  options.peers = std::move(peers);
  TORCH_CHECK(!LossNeedsTargets(options.loss) || train->Get({0}).targets.defined(), "--loss ",
              options.loss.kind, " needs targets, and '", cli.data,
              "' has none (targets.npy, or \"targets\" in the .pt file)");
  Trainer trainer(pipe, train, eval, options);
  if (checkpoints.resume_from) {
    TORCH_CHECK(!distributed,
                "--resume continues one-process runs; checkpoints of several processes hold the "
                "weights only (resume such a run in one process, or train afresh from it without "
                "--resume)");
    ArtifactReader reader(*checkpoints.resume_from);
    TORCH_CHECK(reader.HasRecord(kTrainingStateRecord), "'", *checkpoints.resume_from,
                "' has no training state to resume (it was written by gpipe-compile, or by a run "
                "without --data); "
                "train from it without --resume");
    trainer.Restore(
        ParseTrainingState(reader.ReadRecord(kTrainingStateRecord), *checkpoints.resume_from),
        *checkpoints.resume_from);
  }
  // Weights plus, in one process, everything --resume needs, in one atomic write.
  auto save = [&](const std::string& why) {
    std::vector<ArtifactRecord> extra;
    if (!distributed)
      extra.push_back({kTrainingStateRecord, SerializeTrainingState(trainer.Capture())});
    pipe.save(checkpoints.save, extra);
    if (verbose) {
      std::printf(
          "%s %s after step %lld%s\n", why.c_str(), checkpoints.save.c_str(),
          static_cast<long long>(trainer.step()),
          distributed ? " (weights only: several processes' optimizer states are not saved)" : "");
    }
  };
  if (verbose) {
    std::printf("data %s: %s\n", cli.data.c_str(), all->Describe().c_str());
    std::printf(
        "training on %lld examples%s: batch %lld, %lld batches per epoch, %lld steps, %s, loss "
        "%s\n",
        static_cast<long long>(train->size()),
        eval ? (", evaluating on " + std::to_string(eval->size())).c_str() : "",
        static_cast<long long>(cli.batch_size), static_cast<long long>(trainer.batches_per_epoch()),
        static_cast<long long>(trainer.total_steps()), cli.optimizer.c_str(),
        options.loss.kind.c_str());
    if (checkpoints.resume_from) {
      std::printf("resuming %s after step %lld\n", checkpoints.resume_from->c_str(),
                  static_cast<long long>(trainer.step()));
    }
  }
  TORCH_CHECK(cli.log_every >= 1, "--log-every must be at least 1");
  MetricsFile metrics(verbose ? cli.metrics_out : std::string(),
                      checkpoints.resume_from.has_value());
  const bool live_bar = verbose && isatty(STDERR_FILENO) == 1;
  const int64_t first = trainer.step();
  double seconds = 0;  // this process's training time, for the ETA and the summary
  int64_t examples = 0;
  StepReport last;
  std::optional<EvalReport> last_eval;
  auto on_step = [&](const StepReport& r) {
    last = r;
    seconds += r.seconds;
    examples += r.examples;
    const double eta =
        seconds / static_cast<double>(r.step - first) * static_cast<double>(r.total - r.step);
    if (live_bar) {
      const int filled = static_cast<int>(30 * r.step / r.total);
      std::fprintf(stderr, "\r[%s%s] %lld/%lld  loss %.4f  eta %s ",
                   std::string(filled, '#').c_str(), std::string(30 - filled, '.').c_str(),
                   static_cast<long long>(r.step), static_cast<long long>(r.total), r.loss,
                   Duration(eta).c_str());
      if (r.step == r.total) std::fputc('\n', stderr);
    }
    if (verbose && r.skipped) {  // always shown: the user asked to be told, not stopped
      std::printf("step %lld/%lld  skipped: %s; the weights were not updated (--skip-nonfinite)\n",
                  static_cast<long long>(r.step), static_cast<long long>(r.total),
                  r.skipped->c_str());
      std::fflush(stdout);
      return;
    }
    if (!verbose || (r.step % cli.log_every != 0 && r.step != r.total)) return;
    metrics.Step(r);
    std::printf("step %lld/%lld  epoch %lld  loss %.6f  lr %.3g%s  %.1f samples/s  eta %s\n",
                static_cast<long long>(r.step), static_cast<long long>(r.total),
                static_cast<long long>(r.epoch), r.loss, r.lr,
                r.grad_norm ? ("  grad norm " + std::to_string(*r.grad_norm)).c_str() : "",
                static_cast<double>(r.examples) / r.seconds, Duration(eta).c_str());
    std::fflush(stdout);
  };
  auto on_eval = [&](const EvalReport& r) {
    last_eval = r;
    if (!verbose) return;
    metrics.Eval(last, r);
    std::string extra;
    if (r.accuracy) extra += "  accuracy " + Percent(*r.accuracy);
    if (r.perplexity) extra += "  perplexity " + std::to_string(*r.perplexity);
    std::printf("eval after step %lld: loss %.6f%s (%lld examples)\n",
                static_cast<long long>(r.step), r.loss, extra.c_str(),
                static_cast<long long>(r.examples));
    std::fflush(stdout);
  };
  trainer.Run(on_step, on_eval, [&] {
    const bool stopping = stop(trainer.step());
    if (!checkpoints.save.empty() && checkpoints.every > 0 &&
        trainer.step() % checkpoints.every == 0 && !stopping) {
      save("checkpoint: saved");
    }
    return stopping;
  });
  metrics.Flush();
  if (verbose && trainer.step() > first) {
    std::string evaluated;
    if (last_eval) {
      evaluated = ", eval loss " + std::to_string(last_eval->loss);
      if (last_eval->accuracy) evaluated += ", accuracy " + Percent(*last_eval->accuracy);
      if (last_eval->perplexity)
        evaluated += ", perplexity " + std::to_string(*last_eval->perplexity);
    }
    std::printf("trained steps %lld-%lld in %s (%.1f samples/s): last loss %.6f%s\n",
                static_cast<long long>(first + 1), static_cast<long long>(trainer.step()),
                Duration(seconds).c_str(), static_cast<double>(examples) / seconds, last.loss,
                evaluated.c_str());
  }
  if (!checkpoints.save.empty() && trainer.step() > first) save("saved");
  return {trainer.step(), trainer.total_steps()};
}

}  // namespace gpipe
