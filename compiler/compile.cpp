#include "compiler/compile.h"

#include <algorithm>
#include <boost/filesystem.hpp>
#include <fstream>
#include <limits>
#include <sstream>

#include "compiler/build_pipeline.h"
#include "compiler/model_loader.h"
#include "compiler/partition.h"
#include "compiler/profiler.h"
#include "compiler/unit_chooser.h"
#include "passes/defer_batch_norm.h"
#include "passes/partition_units.h"
#include "passes/specialize_arguments.h"
#include "runtime/artifact.h"
#include "runtime/model_export.h"
#include "runtime/sample_input.h"

namespace gpipe {
namespace {

// Unit index of each --split-before cut (it must fall on a unit boundary).
std::vector<size_t> ForcedUnitCuts(const LoweredProgram& program, const std::vector<std::string>& names) {
  const std::vector<PartitionUnit>& units = program.units;
  std::vector<size_t> cuts;
  if (names.empty()) return cuts;
  StagePlan plan = PlanSplitBefore(program.lowered.graph, names);
  for (size_t s = 1; s < plan.num_stages(); ++s) {
    size_t u = 0;
    while (u < units.size() && units[u].begin < plan.first_node[s]) ++u;
    TORCH_CHECK(u < units.size() && units[u].begin == plan.first_node[s],
                "--split-before cuts inside unit '", units[u == 0 ? 0 : u - 1].name,
                "'; use a larger --unit-depth so that the cut falls between units");
    cuts.push_back(u);
  }
  return cuts;
}

StagePlan PlanFromStarts(const std::vector<PartitionUnit>& units, const std::vector<size_t>& starts) {
  StagePlan plan;
  for (size_t start : starts) plan.first_node.push_back(units[start].begin);  // units tile from node 0
  return plan;
}

double MaxOverMean(const std::vector<double>& v) {
  double total = 0, worst = 0;
  for (double x : v) {
    total += x;
    worst = std::max(worst, x);
  }
  return total > 0 ? worst * static_cast<double>(v.size()) / total : 0;
}

// Unit profiles are taken one unit per stage, where every unit pays a task's
// fixed costs; whole stages behave differently. So: measure the chosen
// stages the same way, scale each unit's cost by its stage's measured /
// predicted ratio, partition again, and keep the plan that measured best.
std::vector<size_t> Calibrate(const LoweredProgram& program, const CompileOptions& options,
                              const std::vector<size_t>& forced, std::vector<size_t> starts, CompileReport& report) {
  std::vector<double>& costs = report.unit_costs;
  std::vector<size_t> best = starts;
  double best_ratio = std::numeric_limits<double>::infinity();
  for (int64_t round = 0; round <= options.calibration_rounds; ++round) {
    std::vector<double> measured = ProfileStageTimes(program, PlanFromStarts(program.units, starts), options);
    double ratio = MaxOverMean(measured);
    report.calibration_ratios.push_back(ratio);
    if (ratio < best_ratio) {
      best_ratio = ratio;
      best = starts;
      report.measured_stage_ms = measured;
    }
    if (round == options.calibration_rounds) break;
    for (size_t s = 0; s < starts.size(); ++s) {
      size_t end = s + 1 < starts.size() ? starts[s + 1] : costs.size();
      double predicted = 0;
      for (size_t u = starts[s]; u < end; ++u) predicted += costs[u];
      if (predicted <= 0) continue;
      for (size_t u = starts[s]; u < end; ++u) costs[u] *= measured[s] / predicted;
    }
    std::vector<size_t> next = OptimalPartition(costs, starts.size(), forced);
    if (next == starts) break;  // the calibrated costs agree with the plan
    starts = next;
  }
  return best;
}

std::string BalanceMethod(const CompileOptions& options) {
  if (options.balance_by) return *options.balance_by == BalanceBy::Time ? "time" : "size";
  return options.split_before.empty() ? "units" : "split-before";
}

// Where the cuts go: profiled and optimal (--balance-by), named
// (--split-before), or counted in units (--stages / --balance).
StagePlan ChoosePlan(const LoweredProgram& program, const CompileOptions& options, CompileReport& report) {
  if (!options.balance_by) {
    return options.split_before.empty() ? PlanStages(program.units, options.balance)
                                        : PlanSplitBefore(program.lowered.graph, options.split_before);
  }
  TORCH_CHECK(options.balance.balance.empty(), "give either --balance or --balance-by, not both");
  UnitProfile profile = ProfileUnits(program, options);
  report.unit_costs = *options.balance_by == BalanceBy::Time ? profile.time_ms : profile.bytes;
  std::vector<size_t> forced = ForcedUnitCuts(program, options.split_before);
  auto num_stages = static_cast<size_t>(std::max<int64_t>(options.balance.num_stages, 1));
  std::vector<size_t> starts = OptimalPartition(report.unit_costs, num_stages, forced);
  if (*options.balance_by == BalanceBy::Time && num_stages > 1 && options.calibration_rounds > 0) {
    starts = Calibrate(program, options, forced, starts, report);
  }
  return PlanFromStarts(program.units, starts);
}

// The units cuts fall between: at --unit-depth, at level 1 for an explicit
// --balance (whose counts refer to them), else chosen for the stage count.
std::vector<PartitionUnit> ChooseUnitsFor(const LoweredModel& lowered, const ModuleTree& tree,
                                          const CompileOptions& options, CompileReport& report) {
  if (options.unit_depth) return tree.Units(tree.Frontier(*options.unit_depth));
  if (!options.balance.balance.empty()) return tree.Units(tree.Frontier(1));
  size_t num_stages = static_cast<size_t>(std::max<int64_t>(options.balance.num_stages, 1));
  std::vector<size_t> required;
  if (!options.split_before.empty()) {
    required = PlanSplitBefore(lowered.graph, options.split_before).first_node;
    num_stages = required.size();
  }
  // Only plain --stages leaves the cuts to the units: say so (and how to fix
  // the level). Under --split-before the cuts are the user's, and under
  // --balance-by the profile places them.
  report.units_chosen = options.split_before.empty() && !options.balance_by;
  return ChooseUnits(tree, num_stages, required);
}

// Every cut must let its crossing values travel between stages (an explicit
// --split-before can ask for one that does not).
void CheckCuts(const LoweredModel& lowered, const ModuleTree& tree, const StagePlan& plan) {
  std::vector<torch::jit::Node*> nodes(lowered.graph->nodes().begin(), lowered.graph->nodes().end());
  for (size_t s = 1; s < plan.num_stages(); ++s) {
    const auto& blocker = tree.BlockerAt(plan.first_node[s]);
    if (!blocker) continue;
    TORCH_CHECK(false, "cannot cut before '", ModulePathOf(nodes[plan.first_node[s]]), "': the value '",
                blocker->value, "' (", blocker->type, ") would cross between stages, and only tensors and "
                "plain values can; cut before or after the code that uses it (gpipe-compile --stages N "
                "chooses valid cuts)");
  }
}

// Arguments no sample gives stay at their defaults; where forward branches
// on one around its layers (timm's ViT wraps every block in `if attn_mask is
// not None or is_causal`), the branch would be one unit, so it is fixed to
// the default and folded away. The artifact refuses other values for it.
void SpecializeOmittedArguments(LoweredModel& lowered, const CompileOptions& options, CompileReport& report) {
  std::vector<std::optional<InputSpec>> given = AssignSpecs(options.sample_inputs, lowered.arguments);
  std::vector<size_t> omitted;
  for (size_t k = 0; k < given.size(); ++k) {
    if (!given[k] && lowered.arguments[k].default_value) omitted.push_back(k);
  }
  std::vector<std::pair<size_t, c10::IValue>> values;
  for (size_t k : FindBranchArguments(*lowered.graph, omitted)) {
    ForwardArgument& arg = lowered.arguments[k];
    arg.specialized = true;
    values.emplace_back(k, *arg.default_value);
    std::ostringstream text;
    text << arg.name << "=" << *arg.default_value;
    report.specialized.push_back(text.str());
  }
  SpecializeArguments(lowered.graph, values);
}

}  // namespace

CompileReport CompileModel(const std::string& model_path, const std::string& output_path,
                           const CompileOptions& options) {
  TORCH_CHECK(options.chunks >= 1, "--chunks is ", options.chunks, "; it must be at least 1");
  LoweredProgram program;
  program.lowered = LowerModel(LoadModel(model_path));
  program.source_name = boost::filesystem::path(model_path).filename().string();
  CompileReport report;
  SpecializeOmittedArguments(program.lowered, options, report);
  if (options.deferred_batch_norm) {
    program.deferred = DeferBatchNorm(program.lowered.graph, program.lowered.attributes, program.lowered.num_inputs);
  }
  const ModuleTree tree(program.lowered.graph);  // module structure and cut blockers, found once
  program.units = ChooseUnitsFor(program.lowered, tree, options, report);
  StagePlan plan = ChoosePlan(program, options, report);
  CheckCuts(program.lowered, tree, plan);
  BuiltPipeline built = BuildPipeline(program, plan, options);
  built.manifest.balance_method = BalanceMethod(options);
  built.manifest.unit_costs = report.unit_costs;
  // The model as the user gave it, byte for byte, for gpipe-export to write back trained.
  std::ifstream source(model_path, std::ios::binary);
  std::ostringstream source_bytes;
  source_bytes << source.rdbuf();
  TORCH_CHECK(source, "cannot read '", model_path, "' again to keep it in the artifact");
  built.records.push_back({kSourceModelRecord, source_bytes.str()});
  WriteArtifact(output_path, built.manifest, built.records);
  report.manifest = std::move(built.manifest);
  report.unit_names = report.manifest.unit_names;
  for (const auto& u : program.units) report.unit_weights.push_back(u.weight);
  report.balance = std::move(built.balance);
  report.parameter_counts = std::move(built.parameter_counts);
  return report;
}

}  // namespace gpipe
