// gpipe-compile: TorchScript model (.pt) -> pipelined artifact (.gpipe).

#include <cstdio>
#include <iostream>

#include <boost/program_options.hpp>

#include "cli/cli_main.h"
#include "compiler/compile.h"
#include "compiler/stage_plan.h"
#include "compiler/verify.h"

namespace po = boost::program_options;

namespace {

int Main(int argc, char** argv) {
  std::string model, output, balance, devices, checkpoint, sample_input, split_before;
  int64_t stages = 1, chunks = 1;
  double tolerance = 1e-5;
  po::options_description opts(
      "Usage: gpipe-compile MODEL.pt -o OUT.gpipe [options]\n"
      "Splits a TorchScript model into pipeline stages and writes a pipelined artifact.\n"
      "Units (what --balance counts) are the model's top-level submodule calls, e.g. the\n"
      "children of an nn.Sequential.\n\nOptions");
  opts.add_options()
      ("help,h", "print this help and exit")
      ("model", po::value(&model), "TorchScript model file (positional)")
      ("output,o", po::value(&output), "artifact to write (required)")
      ("stages", po::value(&stages)->default_value(1),
       "number of stages, splitting the units as evenly as possible")
      ("balance", po::value(&balance), "units per stage, e.g. 3,3,2 (overrides --stages)")
      ("split-before", po::value(&split_before),
       "cut before these submodules, any depth, e.g. layer2.0,layer3.0 (overrides --stages/--balance)")
      ("chunks", po::value(&chunks)->default_value(1), "micro-batches per mini-batch")
      ("checkpoint", po::value(&checkpoint)->default_value("except_last"),
       "recomputation: always, except_last or never")
      ("devices", po::value(&devices), "one device per stage, e.g. cpu,cpu or cuda:0,cuda:1 (default: all cpu)")
      ("deferred-batch-norm", "update batch-norm running statistics once per mini-batch, from all "
       "micro-batches together (as the unpipelined model), instead of once per micro-batch")
      ("verify", "after writing, compare outputs and gradients with the original model")
      ("sample-input", po::value(&sample_input), "input shape(s) for --verify, e.g. 64x512 or 8x128:int64:1000")
      ("tolerance", po::value(&tolerance)->default_value(1e-5), "--verify: largest allowed scaled difference");
  po::positional_options_description positional;
  positional.add("model", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(opts).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  po::notify(vm);
  if (model.empty()) throw po::error("the model file is missing");
  if (output.empty()) throw po::error("-o/--output is required");
  if (vm.count("verify") && sample_input.empty()) throw po::error("--verify needs --sample-input");

  gpipe::CompileOptions options;
  if (vm.count("balance")) options.balance.balance = gpipe::ParseBalance(balance);
  if (vm.count("split-before")) {
    if (vm.count("balance")) throw po::error("give either --balance or --split-before, not both");
    options.split_before = gpipe::SplitList(split_before);
  }
  options.balance.num_stages = stages;
  options.chunks = chunks;
  options.deferred_batch_norm = vm.count("deferred-batch-norm") > 0;
  options.checkpoint = gpipe::ParseCheckpointMode(checkpoint);
  if (vm.count("devices")) options.devices = gpipe::SplitList(devices);
  std::vector<gpipe::InputSpec> specs;
  if (!sample_input.empty()) specs = gpipe::ParseInputSpecs(sample_input);

  gpipe::CompileReport report = gpipe::CompileModel(model, output, options);
  const auto& m = report.manifest;
  std::printf("compiled %s: %zu units -> %zu stages, chunks %lld, checkpoint %s\n", model.c_str(),
              report.unit_names.size(), m.stages.size(), static_cast<long long>(m.chunks),
              gpipe::ToString(m.checkpoint).c_str());
  std::printf("  %-5s %-8s %-6s %-12s %s\n", "stage", "device", "units", "parameters", "unit names");
  for (size_t s = 0; s < m.stages.size(); ++s) {
    std::string names;
    for (const auto& u : m.stages[s].units) names += (names.empty() ? "" : ",") + u;
    std::printf("  %-5zu %-8s %-6lld %-12lld %s\n", s, m.stages[s].device.c_str(),
                static_cast<long long>(report.balance[s]),
                static_cast<long long>(report.parameter_counts[s]), names.c_str());
  }
  std::printf("wrote %s\n", output.c_str());
  if (!vm.count("verify")) return 0;

  gpipe::VerifyResult v = gpipe::VerifyArtifact(model, output, specs, tolerance);
  std::printf("verify: output max|diff| = %.3g, grad max|diff| = %.3g (%zu parameters, worst %s; "
              "scaled by max(1, max|x|), tolerance %.3g) %s\n",
              v.output_diff, v.grad_diff, v.parameters_compared,
              v.worst_grad.empty() ? "-" : v.worst_grad.c_str(), tolerance, v.ok ? "OK" : "FAILED");
  return v.ok ? 0 : gpipe::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  return gpipe::RunCli("gpipe-compile", [&] { return Main(argc, argv); });
}
