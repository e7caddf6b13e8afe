#include "compiler/compile.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <limits>
#include <sstream>

#include "compiler/model_loader.h"
#include "compiler/partition.h"
#include "compiler/profiler.h"
#include "compiler/stage_module.h"
#include "passes/defer_batch_norm.h"
#include "passes/partition_units.h"
#include "passes/split_stages.h"
#include "runtime/artifact.h"
#include "runtime/stage.h"

namespace gpipe {
namespace {

ValueSource ToSource(const ValueRef& ref) {
  ValueSource source;
  source.origin = ref.origin == ValueRef::Origin::ModelInput ? ValueSource::Origin::ModelInput
                                                             : ValueSource::Origin::StageOutput;
  source.stage = static_cast<int64_t>(ref.stage);
  source.index = static_cast<int64_t>(ref.index);
  return source;
}

}  // namespace

BuiltPipeline BuildPipeline(const LoweredModel& lowered, const std::vector<PartitionUnit>& units,
                            const StagePlan& plan, const std::vector<DeferredBatchNorm>& deferred,
                            const CompileOptions& options, const std::string& model_path) {
  const size_t num_stages = plan.num_stages();
  std::vector<std::string> devices = options.devices;
  if (devices.empty()) devices.assign(num_stages, "cpu");
  TORCH_CHECK(devices.size() == num_stages, "--devices lists ", devices.size(),
              " devices but there are ", num_stages, " stages; give one device per stage");
  for (const auto& d : devices) ParseDevice(d);  // fail before the work, not at run time
  if (!options.ranks.empty()) {
    TORCH_CHECK(options.ranks.size() == num_stages, "--ranks lists ", options.ranks.size(),
                " ranks but there are ", num_stages, " stages; give one rank per stage");
    std::set<int> used(options.ranks.begin(), options.ranks.end());
    TORCH_CHECK(*used.begin() == 0 && *used.rbegin() == static_cast<int>(used.size()) - 1, "--ranks uses ranks ",
                c10::Join(",", std::vector<int>(used.begin(), used.end())),
                "; every rank from 0 to the largest must run a stage");
  }

  SplitResult split = SplitStages(lowered.graph, plan, lowered.num_inputs, options.skip_routing);
  BuiltPipeline built;
  Manifest& manifest = built.manifest;
  manifest.source_model = std::filesystem::path(model_path).filename().string();
  manifest.input_names = lowered.input_names;
  manifest.chunks = options.chunks;
  manifest.checkpoint = options.checkpoint;
  manifest.deferred_batch_norm = !deferred.empty();
  for (const auto& ref : split.model_outputs) manifest.outputs.push_back(ToSource(ref));
  size_t unit = 0;
  for (size_t s = 0; s < num_stages; ++s) {
    BuiltStage stage = BuildStageModule(split.stages[s], lowered.attributes, s, deferred);
    StageEntry entry;
    entry.file = "stage_" + std::to_string(s) + ".pt";
    entry.device = devices[s];
    if (!options.ranks.empty()) entry.rank = options.ranks[s];
    size_t end_node = s + 1 < num_stages ? plan.first_node[s + 1] : SIZE_MAX;
    int64_t count = 0;
    for (; unit < units.size() && units[unit].begin < end_node; ++unit, ++count) {
      entry.units.push_back(units[unit].name);
    }
    built.balance.push_back(count);
    for (const auto& ref : split.stages[s].activation_inputs) entry.inputs.push_back(ToSource(ref));
    entry.num_outputs = static_cast<int64_t>(
        split.stages[s].graph->outputs()[0]->node()->inputs().size());
    entry.uses_rng = stage.uses_rng;
    entry.mutated_inputs = stage.mutated_inputs;
    entry.parameters = stage.parameters;
    int64_t elements = 0, bytes_of_parameters = 0;
    for (const auto& p : stage.module.parameters()) {
      elements += p.numel();
      bytes_of_parameters += p.numel() * static_cast<int64_t>(p.element_size());
    }
    built.parameter_counts.push_back(elements);
    built.parameter_bytes.push_back(bytes_of_parameters);
    std::ostringstream bytes;
    stage.module.save(bytes);
    built.records.push_back({entry.file, bytes.str()});
    manifest.stages.push_back(std::move(entry));
  }
  for (const auto& u : units) manifest.unit_names.push_back(u.name);
  return built;
}

namespace {

// Unit index of each --split-before cut (it must fall on a unit boundary).
std::vector<size_t> ForcedUnitCuts(const LoweredModel& lowered, const std::vector<PartitionUnit>& units,
                                   const std::vector<std::string>& names) {
  std::vector<size_t> cuts;
  if (names.empty()) return cuts;
  StagePlan plan = PlanSplitBefore(lowered.graph, names);
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
std::vector<size_t> Calibrate(const LoweredModel& lowered, const std::vector<PartitionUnit>& units,
                              const std::vector<DeferredBatchNorm>& deferred, const CompileOptions& options,
                              const std::string& model_path, const std::string& output_path,
                              const std::vector<size_t>& forced, std::vector<size_t> starts,
                              CompileReport& report) {
  std::vector<double>& costs = report.unit_costs;
  std::vector<size_t> best = starts;
  double best_ratio = std::numeric_limits<double>::infinity();
  for (int64_t round = 0; round <= options.calibration_rounds; ++round) {
    std::vector<double> measured = ProfileStageTimes(lowered, units, PlanFromStarts(units, starts), deferred,
                                                     options, model_path, output_path);
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
StagePlan ChoosePlan(const LoweredModel& lowered, const std::vector<PartitionUnit>& units,
                     const std::vector<DeferredBatchNorm>& deferred, const CompileOptions& options,
                     const std::string& model_path, const std::string& output_path, CompileReport& report) {
  if (!options.balance_by) {
    return options.split_before.empty() ? PlanStages(units, options.balance)
                                        : PlanSplitBefore(lowered.graph, options.split_before);
  }
  TORCH_CHECK(options.balance.balance.empty(), "give either --balance or --balance-by, not both");
  UnitProfile profile = ProfileUnits(lowered, units, deferred, options, model_path, output_path);
  report.unit_costs = *options.balance_by == BalanceBy::Time ? profile.time_ms : profile.bytes;
  std::vector<size_t> forced = ForcedUnitCuts(lowered, units, options.split_before);
  auto num_stages = static_cast<size_t>(std::max<int64_t>(options.balance.num_stages, 1));
  std::vector<size_t> starts = OptimalPartition(report.unit_costs, num_stages, forced);
  if (*options.balance_by == BalanceBy::Time && num_stages > 1 && options.calibration_rounds > 0) {
    starts = Calibrate(lowered, units, deferred, options, model_path, output_path, forced, starts, report);
  }
  return PlanFromStarts(units, starts);
}

}  // namespace

CompileReport CompileModel(const std::string& model_path, const std::string& output_path,
                           const CompileOptions& options) {
  TORCH_CHECK(options.chunks >= 1, "--chunks is ", options.chunks, "; it must be at least 1");
  LoweredModel lowered = LowerModel(LoadModel(model_path));
  std::vector<DeferredBatchNorm> deferred;
  if (options.deferred_batch_norm) {
    deferred = DeferBatchNorm(lowered.graph, lowered.attributes, lowered.num_inputs);
  }
  std::vector<PartitionUnit> units = FindPartitionUnits(lowered.graph, options.unit_depth);

  CompileReport report;
  StagePlan plan = ChoosePlan(lowered, units, deferred, options, model_path, output_path, report);
  BuiltPipeline built = BuildPipeline(lowered, units, plan, deferred, options, model_path);
  built.manifest.balance_method = BalanceMethod(options);
  built.manifest.unit_costs = report.unit_costs;
  WriteArtifact(output_path, built.manifest, built.records);
  report.manifest = std::move(built.manifest);
  report.unit_names = report.manifest.unit_names;
  report.balance = std::move(built.balance);
  report.parameter_counts = std::move(built.parameter_counts);
  return report;
}

}  // namespace gpipe
