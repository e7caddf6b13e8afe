// gpipe-compile: TorchScript model (.pt) -> pipelined artifact (.gpipe).

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <boost/program_options.hpp>

#include "cli/cli_main.h"
#include "compiler/compile.h"
#include "compiler/stage_plan.h"
#include "compiler/verify.h"
#include "runtime/rank_plan.h"
#include "runtime/schedule_ir.h"
#include "runtime/schedule_validate.h"

namespace po = boost::program_options;

namespace {

// Per stage: device, units, parameters, and with a profiled balance the
// measured cost, its share, and what the GPipe schedule predicts from it.
void PrintPlan(const gpipe::CompileReport& report) {
  const auto& m = report.manifest;
  const bool costed = !report.unit_costs.empty();
  const char* unit = m.balance_method == "time" ? "ms" : "MiB";
  const double scale = m.balance_method == "time" ? 1.0 : 1.0 / (1 << 20);
  std::printf("  %-5s %-8s %-6s %-12s %s%s\n", "stage", "device", "units", "parameters",
              costed ? "cost        share  " : "", "unit names");
  std::vector<double> stage_costs;
  size_t first_unit = 0;
  double total = 0;
  for (double c : report.unit_costs) total += c;
  for (size_t s = 0; s < m.stages.size(); ++s) {
    std::string names;
    for (const auto& u : m.stages[s].units) names += (names.empty() ? "" : ",") + u;
    std::string cost;
    if (costed) {
      double c = 0;
      for (size_t u = first_unit; u < first_unit + static_cast<size_t>(report.balance[s]); ++u)
        c += report.unit_costs[u];
      stage_costs.push_back(c);
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, "%8.2f %-3s %5.1f%%  ", c * scale, unit,
                    total > 0 ? 100 * c / total : 0);
      cost = buffer;
    }
    first_unit += static_cast<size_t>(report.balance[s]);
    std::printf("  %-5zu %-8s %-6lld %-12lld %s%s\n", s, m.stages[s].device.c_str(),
                static_cast<long long>(report.balance[s]),
                static_cast<long long>(report.parameter_counts[s]), cost.c_str(), names.c_str());
  }
  if (!costed) return;
  if (!report.measured_stage_ms.empty()) {
    std::string rounds;
    for (double r : report.calibration_ratios)
      rounds += (rounds.empty() ? "" : ", ") + std::to_string(r).substr(0, 5);
    std::string times;
    for (double t : report.measured_stage_ms)
      times += (times.empty() ? "" : ", ") + std::to_string(t).substr(0, 6);
    std::printf("  calibrated: chosen stages measured %s ms; max/mean of the plans tried: %s\n",
                times.c_str(), rounds.c_str());
  }
  double slowest = *std::max_element(stage_costs.begin(), stage_costs.end());
  double mean = total / static_cast<double>(stage_costs.size());
  size_t s = stage_costs.size(), chunks = static_cast<size_t>(m.chunks);
  std::printf("  balance by %s: max/mean stage cost %.3f", m.balance_method.c_str(),
              mean > 0 ? slowest / mean : 0);
  if (m.balance_method == "time") {
    // GPipe: M + S - 1 clocks, each as long as the slowest stage; a micro-batch
    // costs about 1/M of the profiled (whole-batch) stage time.
    std::printf("; predicted step (M+S-1)*max/M = %.2f ms, bubble (S-1)/(M+S-1) = %.1f%%",
                static_cast<double>(chunks + s - 1) * slowest / static_cast<double>(chunks),
                100.0 * gpipe::ValidateSchedule(gpipe::BuildGpipe(s, chunks)).bubble_fraction);
  }
  std::printf("\n");
}

// The heaviest stage's share of the static work estimate (OpWeight), which
// is what --stages balances when nothing is measured.
void PrintLargestStage(const gpipe::CompileReport& report) {
  double total = 0, largest = 0;
  size_t unit = 0, at = 0;
  for (double w : report.unit_weights) total += w;
  for (size_t s = 0; s < report.balance.size(); ++s) {
    double w = 0;
    for (int64_t k = 0; k < report.balance[s]; ++k, ++unit) w += report.unit_weights.at(unit);
    if (w > largest) {
      largest = w;
      at = s;
    }
  }
  if (total <= 0 || report.balance.size() < 2) return;
  std::printf(
      "largest stage: %.1f%% of the estimated work (stage %zu; an even share is %.1f%%)%s\n",
      100 * largest / total, at, 100.0 / static_cast<double>(report.balance.size()),
      report.units_chosen ? "; units chosen for the stage count (--unit-depth D to fix the level)"
                          : "");
}

// With --activation-budget: what each stage's plan keeps and recomputes.
void PrintBudgetPlan(const gpipe::Manifest& m) {
  if (!m.activation_budget_mib) return;
  std::printf("activation budget %.1f MiB per stage and micro-batch:", *m.activation_budget_mib);
  for (size_t s = 0; s < m.stages.size(); ++s) {
    const auto& st = m.stages[s];
    std::printf("%s stage %zu keeps %s, recomputes %.2f GFLOP of products", s ? ";" : "", s,
                gpipe::MiB(st.planned_kept_bytes.value_or(0)).c_str(),
                st.planned_recompute_flops.value_or(0) / 1e9);
  }
  std::printf("\n");
}

int Main(int argc, char** argv) {
  std::string model, output, balance, devices, ranks, checkpoint, sample_input, split_before,
      balance_by;
  std::string optimizer, unbatched_inputs;
  int64_t stages = 1, chunks = 1, profile_steps = 5, unit_depth = 0, calibrate = 2,
          virtual_stages = 1;
  std::string schedule;
  double tolerance = 1e-5, activation_budget = 0;
  po::options_description opts(
      "Usage: gpipe-compile MODEL.pt -o OUT.gpipe [options]\n"
      "Splits a TorchScript model into pipeline stages and writes a pipelined artifact.\n"
      "Units (what --balance counts) are submodule calls, e.g. the children of an nn.Sequential;\n"
      "for --stages N they are chosen at whatever depth gives N balanced stages.\n\nOptions");
  // clang-format off
  opts.add_options()
      ("help,h", "print this help and exit")
      ("model", po::value(&model), "TorchScript model file (positional)")
      ("output,o", po::value(&output), "artifact to write (required)")
      ("stages", po::value(&stages)->default_value(1),
       "number of stages, splitting the units as evenly as possible")
      ("balance", po::value(&balance), "units per stage, e.g. 3,3,2 (overrides --stages)")
      ("split-before", po::value(&split_before),
       "cut before these submodules, any depth, e.g. layer2.0,layer3.0 (overrides --stages/--balance)")
      ("balance-by", po::value(&balance_by),
       "time or size: profile every unit on --sample-input and choose the cuts that minimise the "
       "slowest (largest) of --stages stages; --split-before names become forced cuts")
      ("unit-depth", po::value(&unit_depth),
       "take units from this module level (1 = children of the model, 2 = their children, ...) "
       "instead of choosing them for --stages (the default: descend where a unit is too large "
       "for a good balance)")
      ("profile-steps", po::value(&profile_steps)->default_value(5),
       "--balance-by: measured steps after one warm-up (the median counts)")
      ("calibrate", po::value(&calibrate)->default_value(2),
       "--balance-by time: rounds of measuring the chosen stages, rescaling the unit costs and "
       "partitioning again (0 = trust the unit profile)")
      ("optimizer", po::value(&optimizer)->default_value("sgd"),
       "--balance-by size: sgd, or adam to count its two state tensors per parameter")
      ("chunks", po::value(&chunks)->default_value(1), "micro-batches per mini-batch")
      ("checkpoint", po::value(&checkpoint)->default_value("except_last"),
       "recomputation: always, except_last, never, selective (keep the products with a weight, recompute the "
       "rest) or budget (with --activation-budget)")
      ("activation-budget", po::value(&activation_budget),
       "MiB each stage may keep per micro-batch in flight: keep the products that spare the most "
       "recompute within it (measured on --sample-input; implies --checkpoint budget)")
      ("schedule", po::value(&schedule)->default_value("gpipe"),
       "train_step's order of work, kept in the artifact: gpipe, 1f1b, interleaved-1f1b or zb-h1")
      ("virtual-stages", po::value(&virtual_stages)->default_value(1),
       "--schedule interleaved-1f1b: stages per worker (the stage count must be a multiple)")
      ("devices", po::value(&devices), "one device per stage, e.g. cpu,cpu or cuda:0,cuda:1 (default: all cpu)")
      ("ranks", po::value(&ranks), "for gpipe-run --distributed: the process (rank) running each stage, "
       "e.g. 0,0,1 (default: one stage per rank)")
      ("deferred-batch-norm", "update batch-norm running statistics once per mini-batch, from all "
       "micro-batches together (as the unpipelined model), instead of once per micro-batch")
      ("verify", "after writing, compare outputs and gradients with the original model")
      ("sample-input", po::value(&sample_input),
       "the inputs to compile for, verify and profile on, by position or name: e.g. 64x512, "
       "8x128:int64:1000, src=8x16x32,src_key_padding_mask=8x16:bool (omitted arguments take their "
       "defaults); recorded in the artifact to check inputs against")
      ("unbatched-inputs", po::value(&unbatched_inputs),
       "tensor arguments given whole to every micro-batch instead of split along dim 0, e.g. mask")
      ("tolerance", po::value(&tolerance)->default_value(1e-5, "1e-05"), "--verify: largest allowed scaled difference");
  // clang-format on
  po::variables_map vm;
  if (!gpipe::ParseCommandLine(argc, argv, opts, "model", vm)) return 0;
  if (model.empty()) throw po::error("the model file is missing");
  if (output.empty()) throw po::error("-o/--output is required");
  if (vm.count("verify") && sample_input.empty()) throw po::error("--verify needs --sample-input");

  gpipe::CompileOptions options;
  if (vm.count("balance")) options.balance.balance = gpipe::ParseBalance(balance);
  if (vm.count("split-before")) {
    if (vm.count("balance")) throw po::error("give either --balance or --split-before, not both");
    options.split_before = gpipe::SplitList(split_before);
  }
  if (vm.count("unit-depth")) {
    if (unit_depth < 1) throw po::error("--unit-depth must be at least 1");
    options.unit_depth = static_cast<size_t>(unit_depth);
  }
  if (vm.count("balance-by")) {
    if (balance_by == "time")
      options.balance_by = gpipe::BalanceBy::Time;
    else if (balance_by == "size")
      options.balance_by = gpipe::BalanceBy::Size;
    else
      throw po::error("--balance-by must be time or size, not '" + balance_by + "'");
    if (vm.count("balance")) throw po::error("give either --balance or --balance-by, not both");
    if (sample_input.empty()) throw po::error("--balance-by needs --sample-input to profile on");
  }
  if (optimizer != "sgd" && optimizer != "adam") throw po::error("--optimizer must be sgd or adam");
  options.adam = optimizer == "adam";
  options.profile_steps = profile_steps;
  if (calibrate < 0) throw po::error("--calibrate must be 0 or more");
  options.calibration_rounds = calibrate;
  options.balance.num_stages = stages;
  options.chunks = chunks;
  options.deferred_batch_norm = vm.count("deferred-batch-norm") > 0;
  options.checkpoint = gpipe::ParseCheckpointMode(checkpoint);
  if (vm.count("activation-budget")) {
    if (sample_input.empty()) {
      throw po::error(
          "--activation-budget needs --sample-input: what each stage keeps is measured on the "
          "sample");
    }
    options.activation_budget_mib = activation_budget;
    const bool whole_stages = options.checkpoint == gpipe::CheckpointMode::Never ||
                              options.checkpoint == gpipe::CheckpointMode::ExceptLast ||
                              options.checkpoint == gpipe::CheckpointMode::Always;
    if (!vm["checkpoint"].defaulted() && whole_stages) {
      throw po::error(
          "--activation-budget plans what --checkpoint budget recomputes, but --checkpoint " +
          checkpoint +
          " was given too and would run instead; drop --checkpoint (budget is the "
          "default with --activation-budget) or drop --activation-budget");
    }
    if (vm["checkpoint"].defaulted()) options.checkpoint = gpipe::CheckpointMode::Budget;
  }
  options.schedule = schedule;
  options.virtual_stages = virtual_stages;
  if (vm.count("devices")) options.devices = gpipe::SplitList(devices);
  if (vm.count("ranks")) options.ranks = gpipe::ParseRanks(gpipe::SplitList(ranks));
  std::vector<gpipe::InputSpec> specs;
  if (!sample_input.empty()) specs = gpipe::ParseInputSpecs(sample_input);
  options.sample_inputs = specs;
  if (vm.count("unbatched-inputs")) options.unbatched_inputs = gpipe::SplitList(unbatched_inputs);
  // A line redrawn in place on a terminal; in a log, only the last.
  options.progress = [terminal = isatty(STDERR_FILENO) == 1](const std::string& what, size_t done,
                                                             size_t total) {
    if (terminal) {
      std::fprintf(stderr, "\r%s: step %zu/%zu%s", what.c_str(), done, total,
                   done == total ? "\n" : "");
    } else if (done == total) {
      std::fprintf(stderr, "%s: step %zu/%zu\n", what.c_str(), done, total);
    }
    std::fflush(stderr);
  };

  gpipe::CompileReport report = gpipe::CompileModel(model, output, options);
  const auto& m = report.manifest;
  std::printf("compiled %s: %zu units -> %zu stages, chunks %lld, checkpoint %s\n", model.c_str(),
              report.unit_names.size(), m.stages.size(), static_cast<long long>(m.chunks),
              gpipe::ToString(m.checkpoint).c_str());
  PrintPlan(report);
  PrintLargestStage(report);
  PrintBudgetPlan(m);
  if (!report.specialized.empty()) {  // e.g. timm's ViT: attn_mask=None, is_causal=False
    std::string fixed;
    for (const auto& a : report.specialized) fixed += (fixed.empty() ? "" : ", ") + a;
    const char* them = report.specialized.size() == 1 ? "it" : "them";
    std::printf(
        "fixed %s: forward branches on %s around its layers; give %s with --sample-input to keep "
        "%s as inputs\n",
        fixed.c_str(), them, them, them);
  }
  std::printf("wrote %s\n", output.c_str());
  if (!vm.count("verify")) return 0;

  gpipe::VerifyResult v = gpipe::VerifyArtifact(model, output, specs, tolerance);
  std::printf(
      "verify: output max|diff| = %.3g (worst %s), grad max|diff| = %.3g (%zu parameters, worst "
      "%s; "
      "scaled by max(1, max|x|), tolerance %.3g)",
      v.output_diff, v.worst_output.empty() ? "-" : v.worst_output.c_str(), v.grad_diff,
      v.parameters_compared, v.worst_grad.empty() ? "-" : v.worst_grad.c_str(), tolerance);
  std::printf("; vs the original on the same micro-batches %.3g", v.same_micro_batches_diff);
  if (v.has_float64) {
    std::printf("; error vs float64: pipeline %.3g, original %.3g", v.pipeline_error,
                v.original_error);
  }
  std::printf(" %s\n", v.ok ? "OK" : "FAILED");
  return v.ok ? 0 : gpipe::kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  return gpipe::RunCli("gpipe-compile", [&] { return Main(argc, argv); });
}
