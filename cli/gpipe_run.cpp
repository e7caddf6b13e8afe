// gpipe-run: run or train a pipelined artifact on random data.

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/filesystem.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>
#include <utility>

#include <boost/program_options.hpp>
#include <torch/torch.h>

#include "cli/cli_main.h"
#include "cli/train_on_data.h"
#include "runtime/artifact.h"
#include "runtime/memory_tracker.h"
#include "runtime/peer_group.h"
#include "runtime/pipeline.h"
#include "runtime/rank_plan.h"
#include "runtime/sample_input.h"
#include "runtime/training_loss.h"

namespace po = boost::program_options;

namespace {

// The signal that stopped the run (SIGINT, SIGTERM or SIGHUP), 0 while none
// has: each finishes the step, saves (with --save) and exits 128 + the
// signal, as shells report it (130, 143, 129). SIGTERM is what `timeout`,
// Slurm and `docker stop` send; SIGHUP a closed terminal.
volatile std::sig_atomic_t interrupted = 0;
int ExitInterrupted() { return 128 + static_cast<int>(interrupted); }
const char* SignalName(int signal) {
  return signal == SIGTERM ? "SIGTERM" : signal == SIGHUP ? "SIGHUP" : "SIGINT";
}

// Random data: mse against a fixed random target, or the output's sum.
gpipe::LossOptions RandomDataLoss(const std::string& kind) {
  gpipe::LossOptions loss = gpipe::ParseLoss(kind);
  TORCH_CHECK(loss.kind == "mse" || loss.kind == "sum", "--loss ", kind,
              " needs targets from --data; on random inputs use mse or sum");
  return loss;
}

// Test hook for the fault tests: GPIPE_TEST_FAILPOINT=KIND:RANK:STEP.
// kill makes that rank die by SIGKILL when the step starts, hang makes it
// stop answering (as a stuck host would), killsave kills it halfway through
// writing the checkpoint saved after the step (--data with
// --checkpoint-every).
std::optional<std::pair<std::string, std::pair<int, int64_t>>> TestFailpoint() {
  const char* spec = std::getenv("GPIPE_TEST_FAILPOINT");
  if (spec == nullptr) return std::nullopt;
  char kind[9] = {0};
  int at_rank = -1;
  long long at_step = -1;
  if (std::sscanf(spec, "%8[a-z]:%d:%lld", kind, &at_rank, &at_step) != 3) return std::nullopt;
  return std::make_pair(std::string(kind), std::make_pair(at_rank, static_cast<int64_t>(at_step)));
}

void MaybeFailForTesting(int rank, int64_t step) {
  auto failpoint = TestFailpoint();
  if (!failpoint || failpoint->second != std::make_pair(rank, step)) return;
  std::fflush(stdout);
  if (failpoint->first == "kill") std::raise(SIGKILL);
  if (failpoint->first == "hang") {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

void MaybeFailTheSaveAfterForTesting(int rank, int64_t step) {
  auto failpoint = TestFailpoint();
  if (failpoint && failpoint->first == "killsave" &&
      failpoint->second == std::make_pair(rank, step))
    gpipe::SetArtifactWriteFailpointForTesting(gpipe::ArtifactWriteFailpoint::kKillMidWrite);
}

// With --trace and several ranks, every rank writes its own timeline.
std::string RankFile(const std::string& path, int rank, bool distributed) {
  if (!distributed) return path;
  boost::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string())).string();
}

void PrintMemory(size_t num_stages) {
  std::string line = "  peak activation memory:";
  auto peaks = gpipe::MemoryTracker::PeakBytes(num_stages);
  for (size_t s = 0; s < peaks.size(); ++s) line += " stage " + std::to_string(s) + " " + gpipe::MiB(peaks[s]) + ",";
  line += " all stages " + gpipe::MiB(gpipe::MemoryTracker::TotalPeakBytes());
  std::printf("%s\n", line.c_str());
  line = "  kept per micro-batch (forward to backward):";
  auto kept = gpipe::MemoryTracker::KeptPerMicroBatch(num_stages);
  for (size_t s = 0; s < kept.size(); ++s)
    line += (s ? ", stage " : " stage ") + std::to_string(s) + " " + gpipe::MiB(kept[s]);
  std::printf("%s\n", line.c_str());
}

int Main(int argc, char** argv) {
  std::string artifact, sample_input, loss_kind, checkpoint, devices, save, trace, ranks, schedule;
  int64_t virtual_stages = 1;
  int64_t steps = 10, chunks = 0, seed = 0, threads = 0, threads_per_stage = 0, checkpoint_every = 0;
  int64_t timeout_s = 300;
  std::string backend;
  double lr = 0.01;
  po::options_description opts(
      "Usage: gpipe-run ART.gpipe --sample-input SHAPE [options]\n"
      "       gpipe-run ART.gpipe --train --data PATH [options]\n"
      "Runs (or with --train, trains) a pipelined artifact on random data and reports\n"
      "throughput; with --data, trains on a data file with evaluation.\n\nOptions");
  gpipe::DataTrainingCli data_cli;
  // clang-format off
  opts.add_options()
      ("help,h", "print this help and exit")
      ("artifact", po::value(&artifact), "artifact written by gpipe-compile (positional)")
      ("sample-input", po::value(&sample_input), "input shape(s), e.g. 64x512 or 8x128:int64:1000 (required without --data)")
      ("train", "train instead of running inference (plain SGD on random data; with --data, see --optimizer)")
      ("steps", po::value(&steps)->default_value(10), "number of steps (with --data and no --steps: one epoch)")
      ("lr", po::value(&lr)->default_value(0.01), "--train: learning rate (of every --optimizer)")
      ("loss", po::value(&loss_kind)->default_value("mse"),
       "--train: mse (against a fixed random target) or sum; with --data: cross_entropy (the default there), "
       "nll, mse, bce_with_logits or model (the model returns its loss)")
      ("chunks", po::value(&chunks)->default_value(0), "micro-batches (0 = as compiled)")
      ("checkpoint", po::value(&checkpoint), "what backward recomputes instead of keeping: always, except_last, never, selective or budget (default: as compiled; saving is --save and --checkpoint-every)")
      ("schedule", po::value(&schedule),
       "--train: the order of work: gpipe, 1f1b, interleaved-1f1b, zb-h1, or a CSV file of "
       "actions per worker as PyTorch writes them, e.g. plan.csv (default: as compiled)")
      ("virtual-stages", po::value(&virtual_stages),
       "--schedule interleaved-1f1b: stages per worker (default: as compiled)")
      ("devices", po::value(&devices), "one device per stage (default: as compiled)")
      ("seed", po::value(&seed)->default_value(0), "seed for inputs, target and dropout")
      ("threads", po::value(&threads)->default_value(0),
       "intra-op threads of the calling thread (0 = LibTorch's default)")
      ("threads-per-stage", po::value(&threads_per_stage)->default_value(0),
       "intra-op threads of each CPU stage's worker (0 = cores / CPU stages, at least 1; -1 = LibTorch's "
       "default); in one process, when the stages' threads outnumber the cores, cores / this many worker "
       "threads run every stage's tasks")
      ("save", po::value(&save), "after the last step, write the (trained) artifact here, atomically")
      ("checkpoint-every", po::value(&checkpoint_every)->default_value(0),
       "--save: also write it every K steps, so the last good state survives a crash (0 = only at the end)")
      ("detect-anomaly", "check every stage output and gradient for NaN/Inf and name the first "
       "stage and micro-batch that produced one")
      ("per-micro-batch-weight-gradients", "ablation: each micro-batch's backward adds its linear "
       "layers' weight gradients into .grad, instead of one product over a group of micro-batches")
      ("trace", po::value(&trace), "write a Chrome/Perfetto timeline of every task to this JSON file")
      ("report-memory", "print each stage's peak activation memory per step (counts CPU tensors "
       "the stage's tasks allocate)")
      ("distributed", "run this rank's stages of a multi-process pipeline; reads RANK, WORLD_SIZE, "
       "MASTER_ADDR, MASTER_PORT (and LOCAL_WORLD_SIZE) as torchrun sets them (see gpipe-launch)")
      ("ranks", po::value(&ranks), "--distributed: the rank running each stage, e.g. 0,0,1 (default: "
       "as compiled, else one stage per rank)")
      ("timeout-s", po::value(&timeout_s)->default_value(300),
       "--distributed: give up on a peer that is silent this long (seconds)")
      ("backend", po::value(&backend)->default_value("auto"),
       "--distributed: how GPU tensors travel: auto (NCCL with a CUDA build and a GPU, else Gloo), "
       "gloo (through host memory) or nccl");
  // clang-format on
  po::options_description data_options("Training on data (--train --data PATH)");
  gpipe::AddDataTrainingOptions(data_options, data_cli);
  opts.add(data_options);
  po::variables_map vm;
  if (!gpipe::ParseCommandLine(argc, argv, opts, "artifact", vm)) return 0;
  if (artifact.empty()) throw po::error("the artifact file is missing");
  const bool with_data = vm.count("data") > 0;
  if (with_data && !vm.count("train")) throw po::error("--data needs --train");
  if (vm.count("resume") && !with_data) throw po::error("--resume needs --train --data (the run it continues)");
  if (with_data && !sample_input.empty()) throw po::error("--data gives the inputs; drop --sample-input");
  if (sample_input.empty() && !with_data) throw po::error("--sample-input is required (or --train --data PATH)");
  if (steps < 1) throw po::error("--steps must be at least 1");
  if (chunks < 0) throw po::error("--chunks must be at least 1 (or 0 for the compiled value)");
  if (threads > 0) at::set_num_threads(static_cast<int>(threads));
  if (checkpoint_every < 0) throw po::error("--checkpoint-every must be 0 or more");
  if (checkpoint_every > 0 && save.empty()) throw po::error("--checkpoint-every needs --save OUT");
  const bool train = vm.count("train") > 0;
  if (train && !with_data) RandomDataLoss(loss_kind);  // reject a bad --loss now
  const bool distributed = vm.count("distributed") > 0;
  if (vm.count("ranks") && !distributed) throw po::error("--ranks needs --distributed");
  if (timeout_s < 1) throw po::error("--timeout-s must be at least 1");
  if (!vm["backend"].defaulted() && !distributed) throw po::error("--backend needs --distributed");
  if (with_data && !trace.empty()) {
    throw po::error(
        "--trace records runs on --sample-input; training on --data writes no trace, so drop it");
  }
  if (vm.count("schedule") && !train) {
    throw po::error("--schedule orders training's work; it needs --train");
  }
  // Before the run, not after it: a path that cannot be written would lose the run's work.
  if (!save.empty()) gpipe::CheckOutputPath(save, "model.gpipe", "--save");
  if (!data_cli.metrics_out.empty()) {
    gpipe::CheckOutputPath(data_cli.metrics_out, "metrics.jsonl", "--metrics-out");
  }

  gpipe::PipelineOptions options;
  if (chunks > 0) options.chunks = chunks;
  options.threads_per_stage = static_cast<int>(threads_per_stage);
  options.detect_anomaly = vm.count("detect-anomaly") > 0;
  options.batch_weight_gradients = vm.count("per-micro-batch-weight-gradients") == 0;
  if (vm.count("checkpoint")) options.checkpoint = gpipe::ParseCheckpointMode(checkpoint);
  if (vm.count("schedule")) options.schedule = schedule;
  if (vm.count("virtual-stages")) {
    if (virtual_stages < 1) throw po::error("--virtual-stages must be at least 1");
    options.virtual_stages = static_cast<size_t>(virtual_stages);
  }
  if (vm.count("devices")) options.devices = gpipe::SplitList(devices);
  auto specs = with_data ? std::vector<gpipe::InputSpec>{} : gpipe::ParseInputSpecs(sample_input);
  const bool report_memory = vm.count("report-memory") > 0;
  if (report_memory) gpipe::MemoryTracker::Enable();  // before any stage allocates
  std::shared_ptr<gpipe::PeerGroup> peers;
  int rank = 0;
  if (distributed) {
    auto peer_options = gpipe::PeerGroupOptionsFromEnvironment();
    peer_options.timeout = std::chrono::seconds(timeout_s);
    peer_options.backend = gpipe::ParsePeerBackend(backend);
    peers = std::make_shared<gpipe::PeerGroup>(peer_options);
    rank = peers->rank();
    // Every rank must run the same steps on the same data, or they wait on each other forever.
    peers->CheckSameAsRankZero("options (--sample-input, --train, --steps, --lr, --loss, --seed, --save, "
                               "--checkpoint-every)",
                               sample_input + "|" + std::to_string(vm.count("train")) + "|" +
                                   std::to_string(steps) + "|" + std::to_string(lr) + "|" + loss_kind + "|" +
                                   std::to_string(seed) + "|" + std::to_string(save.empty()) + "|" +
                                   std::to_string(checkpoint_every));
    options.peers = peers;
    if (vm.count("ranks")) options.ranks = gpipe::ParseRanks(gpipe::SplitList(ranks));
  }
  const bool verbose = rank == 0;  // rank 0 reports; the others print their summary only
  auto load_start = std::chrono::steady_clock::now();
  gpipe::Pipeline pipe = gpipe::Pipeline::load(artifact, options);
  double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  pipe.train(train);
  pipe.set_tracing(!trace.empty());

  torch::manual_seed(seed);
  std::vector<c10::IValue> inputs = with_data ? std::vector<c10::IValue>{} : gpipe::MakeSampleInputs(specs, pipe.signature());
  int64_t batch = with_data ? data_cli.batch_size : 0;
  for (const auto& v : inputs) {
    if (batch == 0 && v.isTensor() && v.toTensor().dim() >= 1) batch = v.toTensor().size(0);
  }
  if (verbose) {
    std::printf("%s: %zu stages, chunks %lld, checkpoint %s, batch %lld, %s (loaded in %.2f s)\n",
                artifact.c_str(), pipe.num_stages(), static_cast<long long>(pipe.chunks()),
                gpipe::ToString(pipe.checkpoint()).c_str(), static_cast<long long>(batch),
                train ? "training" : "inference", load_seconds);
  }
  if (!trace.empty()) {
    gpipe::CheckOutputPath(RankFile(trace, rank, distributed), "trace.json", "--trace");
  }
  if (distributed) {
    std::printf("rank %d of %d runs %zu of %zu stages%s\n", rank, peers->size(), pipe.num_local_stages(),
                pipe.num_stages(), pipe.holds_outputs() ? " and computes the loss" : "");
  }

  // Ctrl-C, SIGTERM or SIGHUP end the current step cleanly, save (with --save) and exit.
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    std::signal(signal, [](int received) { interrupted = received; });
  }
  // Started by gpipe-launch: a launcher that dies (even by SIGKILL) stops this rank like SIGTERM.
  if (const char* launcher = std::getenv("GPIPE_LAUNCHER_PID")) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (std::to_string(::getppid()) != launcher) interrupted = SIGTERM;  // it died before prctl
  }
  if (with_data) {
    // After each step: a Ctrl-C on any rank stops every rank.
    auto stop = [&](int64_t step) {
      MaybeFailTheSaveAfterForTesting(rank, step);
      MaybeFailForTesting(rank, step + 1);
      if (peers) {
        at::Tensor stop = at::full({1}, interrupted ? 1.0 : 0.0, at::kDouble);
        peers->AllReduceSum(stop, "the end of step " + std::to_string(step));
        // The ranks' common answer, not this rank's flag: a signal landing
        // after the sum would stop this rank alone, and the others would wait.
        const bool any = stop.item<double>() > 0;
        if (any && !interrupted) interrupted = SIGINT;  // another rank's
        return any;
      }
      return interrupted != 0;
    };
    std::optional<int64_t> data_steps;
    if (!vm["steps"].defaulted()) data_steps = steps;
    gpipe::CheckpointCli checkpoints{save, checkpoint_every, std::nullopt};
    if (vm.count("resume")) checkpoints.resume_from = artifact;
    const gpipe::DataRunEnd end =
        gpipe::TrainOnData(pipe, data_cli, vm, lr, data_steps, static_cast<uint64_t>(seed), peers,
                           verbose, checkpoints, stop);
    if (interrupted && verbose) {
      std::printf("interrupted after step %lld of %lld (%s)\n",
                  static_cast<long long>(end.last_step), static_cast<long long>(end.total_steps),
                  SignalName(interrupted));
    }
    return interrupted ? ExitInterrupted() : 0;
  }
  const gpipe::LossOptions loss = RandomDataLoss(loss_kind);
  torch::optim::SGD optimizer(pipe.parameters(), torch::optim::SGDOptions(lr));
  at::Tensor target;
  std::vector<double> rates;
  double first_loss = 0, last_loss = 0;
  int64_t done = 0;
  bool stopping = false;  // in several processes, what every rank agreed after the last step
  for (int64_t step = 1; step <= steps && !stopping; ++step) {
    gpipe::MemoryTracker::ResetPeaks();
    auto start = std::chrono::steady_clock::now();
    double loss_value = 0;
    MaybeFailForTesting(rank, step);
    if (train) {
      optimizer.zero_grad();
      if (pipe.schedule() == "gpipe") {
        loss_value = pipe.train_step(inputs, [&](const std::vector<at::Tensor>& outputs) {
          at::Tensor out = gpipe::LossInput(loss, outputs);  // the first floating output
          if (!target.defined()) target = torch::randn_like(out.detach());
          return gpipe::ComputeLoss(loss, out, target);
        });
      } else {  // the loss inside the schedule, one share per micro-batch
        loss_value = pipe.train_step(
            inputs, [&](const gpipe::MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
              at::Tensor out = gpipe::LossInput(loss, outputs);
              if (!target.defined()) {
                std::vector<int64_t> shape = out.sizes().vec();
                shape.at(0) = rows.batch;
                target = torch::randn(shape, out.options().requires_grad(false));
              }
              return gpipe::LossShares(loss, target).Share(out, rows.offset, rows.size, rows.batch);
            });
      }
      TORCH_CHECK(std::isfinite(loss_value), "step ", step, ": the loss is ",
                  std::isnan(loss_value) ? "NaN" : (loss_value > 0 ? "+Inf" : "-Inf"),
                  "; the weights were not updated. Lower --lr, or find the first stage and micro-batch "
                  "producing NaN/Inf with --detect-anomaly");
      optimizer.step();
    } else {
      torch::NoGradGuard no_grad;
      pipe.forward(inputs);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(static_cast<double>(batch) / seconds);
    if (step == 1) first_loss = loss_value;
    last_loss = loss_value;
    if (peers) {  // a Ctrl-C on any rank stops every rank after this step
      at::Tensor stop = at::full({1}, interrupted ? 1.0 : 0.0, at::kDouble);
      peers->AllReduceSum(stop, "the end of step " + std::to_string(step));
      stopping = stop.item<double>() > 0;  // the common answer (see TrainOnData's stop)
      if (stopping && !interrupted) interrupted = SIGINT;  // another rank's
    } else {
      stopping = interrupted != 0;
    }
    if (verbose && train) {
      std::printf("step %lld/%lld  loss %.6f  %.1f samples/s\n", static_cast<long long>(step),
                  static_cast<long long>(steps), loss_value, rates.back());
    } else if (verbose) {
      std::printf("step %lld/%lld  %.1f samples/s\n", static_cast<long long>(step),
                  static_cast<long long>(steps), rates.back());
    }
    if (report_memory) PrintMemory(pipe.num_stages());
    done = step;
    if (checkpoint_every > 0 && step % checkpoint_every == 0 && step < steps) {
      pipe.save(save);
      if (verbose) std::printf("checkpoint: saved %s after step %lld\n", save.c_str(), static_cast<long long>(step));
    }
    std::fflush(stdout);
  }
  if (interrupted && verbose) {
    std::printf("interrupted after step %lld of %lld (%s)\n", static_cast<long long>(done),
                static_cast<long long>(steps), SignalName(interrupted));
  }
  if (done == 0) {  // interrupted before any step finished: nothing new to report or save
    return ExitInterrupted();
  }
  steps = done;
  // Step 1 pays for warm-up (allocations, executor profiling): leave it out when we can.
  std::vector<double> steady(rates.size() > 1 ? rates.begin() + 1 : rates.begin(), rates.end());
  std::sort(steady.begin(), steady.end());
  double median = steady[steady.size() / 2];
  if (distributed && !verbose) {
    std::printf("summary: %lld steps, median %.1f samples/s\n", static_cast<long long>(steps), median);
  } else if (train) {
    std::printf("summary: %lld steps, loss %.6f -> %.6f, median %.1f samples/s (steps %s)\n",
                static_cast<long long>(steps), first_loss, last_loss, median,
                rates.size() > 1 ? "2.." : "1");
  } else {
    std::printf("summary: %lld steps, median %.1f samples/s\n", static_cast<long long>(steps), median);
  }
  if (!trace.empty()) {
    std::string file = RankFile(trace, rank, distributed);
    gpipe::WriteFileAtomically(file, gpipe::ChromeTraceJson(pipe.take_trace(), pipe.worker_names()));
    std::printf("wrote trace %s (open in ui.perfetto.dev or chrome://tracing)\n", file.c_str());
  }
  if (!save.empty()) {
    pipe.save(save);
    if (verbose) std::printf("saved %s\n", save.c_str());
  }
  return interrupted ? ExitInterrupted() : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpipe::RunCli("gpipe-run", [&] { return Main(argc, argv); });
}
