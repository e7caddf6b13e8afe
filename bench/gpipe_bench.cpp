// gpipe-bench: plain TorchScript training vs pipelined configurations, side
// by side in one process, interleaved step by step so that noise hits all of
// them alike. Prints median samples/s with the spread, the ratio to the plain
// model, peak activation memory, and the GPipe bound from the run's own trace.

#include <algorithm>
#include <boost/filesystem.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>

#include <boost/program_options.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include "cli/cli_main.h"
#include "compiler/compile.h"
#include "runtime/memory_tracker.h"
#include "runtime/pipeline.h"
#include "runtime/sample_input.h"
#include "runtime/stage.h"

namespace po = boost::program_options;

namespace {

struct Config {
  std::string label;
  int64_t stages, chunks;
  gpipe::CheckpointMode checkpoint;
  bool one_worker = false;    // ablation "+one-worker": all stages on one thread
  bool pass_through = false;  // ablation "+pass-through": skips relayed through every stage
  bool traced = true;         // "+untraced": no task trace (measures tracing's cost; no bound)
  bool copy_streams = true;   // ablation "+no-copy-streams": CUDA copies on the compute streams
  bool batch_weight_gradients = true;  // ablation "+per-micro-batch-dw": each backward adds its own
  bool share_cpu_threads = true;  // ablation "+thread-per-stage": every CPU stage's thread runs
};

// "4x8:except_last", optionally with suffixes: "4x8:never+one-worker+pass-through+untraced".
Config ParseConfig(const std::string& text) {
  auto colon = text.find(':');
  auto x = text.find('x');
  TORCH_CHECK(x != std::string::npos && colon != std::string::npos && x < colon,
              "config '", text, "' should look like STAGESxCHUNKS:MODE[+ABLATION...], e.g. 4x8:never");
  std::string mode = text.substr(colon + 1);
  std::vector<std::string> suffixes;
  for (auto plus = mode.find('+'); plus != std::string::npos; plus = mode.find('+')) {
    auto next = mode.find('+', plus + 1);
    suffixes.push_back(mode.substr(plus + 1, next == std::string::npos ? std::string::npos : next - plus - 1));
    mode.erase(plus, next == std::string::npos ? std::string::npos : next - plus);
  }
  Config c{text, std::stoll(text.substr(0, x)), std::stoll(text.substr(x + 1, colon - x - 1)),
           gpipe::ParseCheckpointMode(mode)};
  for (const auto& a : suffixes) {
    TORCH_CHECK(a == "one-worker" || a == "pass-through" || a == "untraced" || a == "no-copy-streams" ||
                    a == "per-micro-batch-dw" || a == "thread-per-stage",
                "unknown suffix '+", a, "' in config '", text,
                "'; use +one-worker, +pass-through, +no-copy-streams, +per-micro-batch-dw, +thread-per-stage "
                "or +untraced");
    c.one_worker = c.one_worker || a == "one-worker";
    c.pass_through = c.pass_through || a == "pass-through";
    c.traced = c.traced && a != "untraced";
    c.copy_streams = c.copy_streams && a != "no-copy-streams";
    c.batch_weight_gradients = c.batch_weight_gradients && a != "per-micro-batch-dw";
    c.share_cpu_threads = c.share_cpu_threads && a != "thread-per-stage";
  }
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GPipe bound for one step from the traced tasks: each clock lasts as long as
// its slowest task, forward and backward phases apart:
// (M+S-1) * (max_j median forward_j + max_j median backward_j).
double BoundSeconds(const std::vector<gpipe::TaskRecord>& records, size_t stages, size_t chunks) {
  std::vector<std::vector<double>> fwd(stages), bwd(stages);
  for (const auto& r : records) {
    double s = static_cast<double>(r.end_ns - r.start_ns) / 1e9;
    // A recompute is recorded on its own and inside its backward task: count the task.
    if (r.phase == gpipe::TaskRecord::Phase::Forward) fwd[r.stage].push_back(s);
    if (r.phase == gpipe::TaskRecord::Phase::Backward) bwd[r.stage].push_back(s);
  }
  double max_f = 0, max_b = 0;
  for (size_t j = 0; j < stages; ++j) {
    if (!fwd[j].empty()) max_f = std::max(max_f, Median(fwd[j]));
    if (!bwd[j].empty()) max_b = std::max(max_b, Median(bwd[j]));
  }
  return static_cast<double>(chunks + stages - 1) * (max_f + max_b);
}

int Main(int argc, char** argv) {
  std::string model, sample_input, configs_text, device_text = "cpu";
  int64_t steps = 10;
  po::options_description opts(
      "Usage: gpipe-bench MODEL.pt --sample-input SHAPE --configs 1x1:never,4x8:never,...\n"
      "Trains the plain model and each pipeline configuration (STAGESxCHUNKS:CHECKPOINT)\n"
      "step by step in turn and prints a comparison table.\n\nOptions");
  opts.add_options()
      ("help,h", "print this help and exit")
      ("model", po::value(&model), "TorchScript model (positional)")
      ("sample-input", po::value(&sample_input), "batch shape, e.g. 256x512")
      ("configs", po::value(&configs_text)->default_value("1x1:never,2x8:never,2x8:except_last,4x8:never"),
       "pipelines to compare: STAGESxCHUNKS:CHECKPOINT, optionally +one-worker, +pass-through, "
       "+no-copy-streams, +per-micro-batch-dw, +thread-per-stage (ablations) or +untraced (no task trace, so no bound)")
      ("steps", po::value(&steps)->default_value(10), "measured steps per variant (after one warm-up)")
      ("device", po::value(&device_text)->default_value("cpu"),
       "run the plain model and every stage here (cuda: S virtual stages on one GPU)");
  po::variables_map vm;
  if (!gpipe::ParseCommandLine(argc, argv, opts, "model", vm)) return 0;
  if (model.empty() || sample_input.empty()) throw po::error("MODEL.pt and --sample-input are required");

  gpipe::MemoryTracker::Enable();
  auto specs = gpipe::ParseInputSpecs(sample_input);
  torch::manual_seed(0);
  const c10::Device device = gpipe::ParseDevice(device_text);
  auto inputs = gpipe::MakeSampleInputs(specs);
  for (auto& v : inputs) {
    if (v.isTensor()) v = v.toTensor().to(device);
  }
  const double batch = static_cast<double>(specs[0].shape[0]);
  boost::filesystem::path dir =
      boost::filesystem::temp_directory_path() / ("gpipe-bench-" + std::to_string(::getpid()));
  boost::filesystem::create_directories(dir);

  torch::jit::Module plain = torch::jit::load(model, device);
  plain.train();
  std::vector<at::Tensor> plain_params;
  for (const auto& p : plain.parameters()) plain_params.push_back(p);
  torch::optim::SGD plain_sgd(plain_params, 1e-4);

  std::vector<Config> configs;
  std::vector<gpipe::Pipeline> pipes;
  std::vector<std::unique_ptr<torch::optim::SGD>> sgds;
  for (const auto& text : gpipe::SplitList(configs_text)) {
    Config c = ParseConfig(text);
    gpipe::CompileOptions options;
    options.balance.num_stages = c.stages;
    options.chunks = c.chunks;
    options.checkpoint = c.checkpoint;
    if (c.pass_through) options.skip_routing = gpipe::SkipRouting::PassThrough;
    std::string path = (dir / ("c" + std::to_string(configs.size()) + ".gpipe")).string();
    gpipe::CompileModel(model, path, options);
    gpipe::PipelineOptions run_options;
    run_options.one_worker = c.one_worker;
    run_options.copy_streams = c.copy_streams;
    run_options.batch_weight_gradients = c.batch_weight_gradients;
    run_options.share_cpu_threads = c.share_cpu_threads;
    run_options.devices.assign(static_cast<size_t>(c.stages), device_text);
    pipes.push_back(gpipe::Pipeline::load(path, run_options));
    pipes.back().train();
    pipes.back().set_tracing(c.traced);
    sgds.push_back(std::make_unique<torch::optim::SGD>(pipes.back().parameters(), 1e-4));
    configs.push_back(c);
  }
  boost::filesystem::remove_all(dir);

  const size_t variants = configs.size() + 1;  // 0 = plain
  std::vector<std::vector<double>> seconds(variants), peaks(variants);
  std::vector<std::vector<double>> bounds(variants);
  for (int64_t step = 0; step <= steps; ++step) {
    for (size_t v = 0; v < variants; ++v) {
      gpipe::MemoryTracker::ResetPeaks();
      auto start = std::chrono::steady_clock::now();
      if (v == 0) {
        gpipe::MemoryTracker::StageScope count_as_stage_0(0);
        plain_sgd.zero_grad();
        plain.forward(inputs).toTensor().sum().backward();
        plain_sgd.step();
      } else {
        sgds[v - 1]->zero_grad();
        pipes[v - 1].forward(inputs).at(0).sum().backward();
        sgds[v - 1]->step();
      }
      if (device.is_cuda()) torch::cuda::synchronize();  // kernels are asynchronous
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      auto trace = v == 0 ? std::vector<gpipe::TaskRecord>{} : pipes[v - 1].take_trace();
      if (step == 0) continue;  // warm-up
      seconds[v].push_back(s);
      peaks[v].push_back(static_cast<double>(gpipe::MemoryTracker::TotalPeakBytes()) / (1 << 20));
      if (v > 0 && configs[v - 1].traced) {
        bounds[v].push_back(BoundSeconds(trace, static_cast<size_t>(configs[v - 1].stages),
                                         static_cast<size_t>(configs[v - 1].chunks)));
      }
    }
  }
  double plain_rate = batch / Median(seconds[0]);
  std::printf("%s on %s, batch %s, %lld interleaved steps each (median; spread = min..max samples/s)\n",
              model.c_str(), device_text.c_str(), sample_input.c_str(), static_cast<long long>(steps));
  std::printf("%-46s %12s %20s %10s %12s %14s\n", "variant", "samples/s", "spread", "vs plain",
              "peak MiB", "bound eff.");
  for (size_t v = 0; v < variants; ++v) {
    double rate = batch / Median(seconds[v]);
    double lo = batch / *std::max_element(seconds[v].begin(), seconds[v].end());
    double hi = batch / *std::min_element(seconds[v].begin(), seconds[v].end());
    char spread[32], eff[32] = "-";
    std::snprintf(spread, sizeof spread, "%.0f..%.0f", lo, hi);
    if (!bounds[v].empty()) std::snprintf(eff, sizeof eff, "%.2f", Median(bounds[v]) / Median(seconds[v]));
    std::printf("%-46s %12.1f %20s %9.2fx %12.1f %14s\n", v == 0 ? "plain TorchScript" : ("gpipe " + configs[v - 1].label).c_str(),
                rate, spread, rate / plain_rate, Median(peaks[v]), eff);
  }
  std::printf("bound eff. = GPipe bound (M+S-1)*(max stage forward + max stage backward per micro-batch,\n"
              "medians from this run's trace) / measured step; 1.00 = the schedule adds nothing.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpipe::RunCli("gpipe-bench", [&] { return Main(argc, argv); });
}
