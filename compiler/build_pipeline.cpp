#include "compiler/build_pipeline.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include <torch/utils.h>

#include "compiler/activation_budget.h"
#include "compiler/stage_module.h"
#include "passes/choose_saved_values.h"
#include "passes/split_stages.h"
#include "runtime/microbatch.h"
#include "runtime/sample_input.h"
#include "runtime/schedule_validate.h"
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

void CheckPlacement(const CompileOptions& options, size_t num_stages,
                    std::vector<std::string>& devices) {
  if (devices.empty()) devices.assign(num_stages, "cpu");
  TORCH_CHECK(devices.size() == num_stages, "--devices lists ", devices.size(),
              " devices but there are ", num_stages, " stages; give one device per stage");
  for (const auto& d : devices) ParseDevice(d);  // fail before the work, not at run time
  if (options.ranks.empty()) return;
  TORCH_CHECK(options.ranks.size() == num_stages, "--ranks lists ", options.ranks.size(),
              " ranks but there are ", num_stages, " stages; give one rank per stage");
  std::set<int> used(options.ranks.begin(), options.ranks.end());
  TORCH_CHECK(*used.begin() == 0 && *used.rbegin() == static_cast<int>(used.size()) - 1,
              "--ranks uses ranks ", c10::Join(",", std::vector<int>(used.begin(), used.end())),
              "; every rank from 0 to the largest must run a stage");
}

// forward's arguments as the artifact records them: with the dtype and shape
// of the compile-time sample, and which tensors are not split into micro-batches.
std::vector<ForwardArgument> ArgumentsWithSamples(std::vector<ForwardArgument> arguments,
                                                  const CompileOptions& options) {
  std::vector<std::optional<InputSpec>> samples = AssignSpecs(options.sample_inputs, arguments);
  for (size_t k = 0; k < arguments.size(); ++k) {
    if (!samples[k] || !arguments[k].is_tensor() || samples[k]->shape.empty()) continue;
    arguments[k].sample_dtype = samples[k]->dtype;
    arguments[k].sample_sizes = samples[k]->shape;
  }
  for (const auto& name : options.unbatched_inputs) {
    auto it = std::find_if(arguments.begin(), arguments.end(),
                           [&](const ForwardArgument& a) { return a.name == name; });
    TORCH_CHECK(it != arguments.end() && it->is_tensor(), "--unbatched-inputs names '", name,
                "', which is not a tensor argument of ", SignatureText(arguments));
    it->batched = false;
  }
  return arguments;
}

// Which of stage s's graph inputs are weights: its attributes, and a tied
// weight another stage owns and routes to it (that stage returns its input).
std::vector<bool> WeightInputs(const SplitResult& split, size_t s) {
  const StageGraph& stage = split.stages[s];
  std::vector<bool> weights(stage.graph->inputs().size(), true);
  for (size_t k = 0; k < stage.activation_inputs.size(); ++k) {
    const ValueRef& ref = stage.activation_inputs[k];
    weights[k] = false;
    if (ref.origin != ValueRef::Origin::StageOutput) continue;
    const StageGraph& producer = split.stages[ref.stage];
    const torch::jit::Value* routed = producer.graph->outputs()[0]->node()->input(ref.index);
    weights[k] = routed->node()->kind() == c10::prim::Param &&
                 routed->offset() >= producer.activation_inputs.size();
  }
  return weights;
}

// --activation-budget: what each stage holds per micro-batch, measured on the
// sample's first (largest) micro-batch; empty without a budget.
std::vector<StageKeepCosts> MeasureForBudget(const LoweredProgram& program, const StagePlan& plan,
                                             const SplitResult& split,
                                             const CompileOptions& options,
                                             const std::vector<ForwardArgument>& arguments) {
  if (!options.activation_budget_mib) {
    TORCH_CHECK(
        options.checkpoint != CheckpointMode::Budget,
        "--checkpoint budget needs --activation-budget MiB: the budget its recompute plan fits");
    return {};
  }
  const double budget = *options.activation_budget_mib;
  TORCH_CHECK(std::isfinite(budget) && budget > 0, "--activation-budget is ", budget,
              "; give a positive number of MiB per stage and micro-batch");
  // Beyond this the budget in bytes overflows (it printed negative MiB); no
  // stage keeps a tebibyte per micro-batch.
  constexpr int64_t kMostMib = int64_t{1} << 20;
  TORCH_CHECK(budget <= static_cast<double>(kMostMib), "--activation-budget ", budget,
              " MiB is more than any stage keeps per micro-batch; give at most ", kMostMib,
              " MiB (1 TiB)");
  TORCH_CHECK(
      options.checkpoint != CheckpointMode::Selective,
      "--checkpoint selective keeps the selective plan, which --activation-budget replaces; "
      "give one of them");
  TORCH_CHECK(!options.sample_inputs.empty(),
              "--activation-budget needs --sample-input: what each "
              "stage keeps is measured on the sample");
  torch::manual_seed(0);
  MicroBatches micro_batches =
      Scatter(MakeSampleInputs(options.sample_inputs, arguments), options.chunks, arguments);
  return MeasureKeepCosts(program.lowered, plan, split, micro_batches.inputs.at(0));
}

}  // namespace

BuiltPipeline BuildPipeline(const LoweredProgram& program, const StagePlan& plan,
                            const CompileOptions& options) {
  const LoweredModel& lowered = program.lowered;
  const std::vector<PartitionUnit>& units = program.units;
  const size_t num_stages = plan.num_stages();
  std::vector<std::string> devices = options.devices;
  CheckPlacement(options, num_stages, devices);

  SplitResult split = SplitStages(lowered.graph, plan, lowered.num_inputs, options.skip_routing);
  BuiltPipeline built;
  Manifest& manifest = built.manifest;
  manifest.source_model = program.source_name;
  manifest.input_names = lowered.input_names;
  manifest.arguments = ArgumentsWithSamples(lowered.arguments, options);
  manifest.output_structure = lowered.output_structure;
  manifest.chunks = options.chunks;
  manifest.checkpoint = options.checkpoint;
  manifest.schedule = options.schedule;
  manifest.virtual_stages = options.virtual_stages;
  TORCH_CHECK(options.virtual_stages >= 1, "--virtual-stages must be at least 1");
  // The schedule must fit these stages, before anything is written.
  CheckScheduleFits(options.schedule, num_stages, static_cast<size_t>(options.chunks),
                    static_cast<size_t>(options.virtual_stages));
  manifest.deferred_batch_norm = !program.deferred.empty();
  const std::vector<StageKeepCosts> keep_costs =
      MeasureForBudget(program, plan, split, options, manifest.arguments);
  manifest.activation_budget_mib = options.activation_budget_mib;
  if (!keep_costs.empty()) {
    CheckBudgetCoversEveryStage(keep_costs,
                                static_cast<int64_t>(*options.activation_budget_mib * (1 << 20)));
  }
  for (const auto& ref : split.model_outputs) manifest.outputs.push_back(ToSource(ref));
  size_t unit = 0;
  for (size_t s = 0; s < num_stages; ++s) {
    // Every artifact carries a recompute plan, so any can run --checkpoint
    // selective (or, compiled with a budget, --checkpoint budget).
    const StageGraph& graph = split.stages[s];
    StageEntry entry;
    std::vector<size_t> saved_nodes;
    if (keep_costs.empty()) {
      saved_nodes = ChooseSelectiveSaves(graph.graph, WeightInputs(split, s));
    } else {
      const auto budget_bytes = static_cast<int64_t>(*options.activation_budget_mib * (1 << 20));
      BudgetChoice choice = ChooseWithinBudget(keep_costs[s], budget_bytes, s);
      saved_nodes = std::move(choice.saved_nodes);
      entry.planned_kept_bytes = choice.kept_bytes;
      entry.planned_recompute_flops = choice.recompute_flops;
    }
    RecomputeGraphs recompute =
        SplitForRecompute(graph.graph, graph.activation_inputs.size(), saved_nodes);
    BuiltStage stage = BuildStageModule(graph, lowered.attributes, s, program.deferred, &recompute);
    entry.file = "stage_" + std::to_string(s) + ".pt";
    entry.device = devices[s];
    if (!options.ranks.empty()) entry.rank = options.ranks[s];
    size_t end_node = s + 1 < num_stages ? plan.first_node[s + 1] : SIZE_MAX;
    int64_t count = 0;
    // A unit belongs to the stage its last node runs in: a --split-before
    // cut falls on the named call, after the unit's leading bookkeeping
    // nodes (layer2.0.conv1's begin lies before the cut at layer2.0).
    for (; unit < units.size() && units[unit].end <= end_node; ++unit, ++count) {
      entry.units.push_back(units[unit].name);
    }
    built.balance.push_back(count);
    for (const auto& ref : split.stages[s].activation_inputs) entry.inputs.push_back(ToSource(ref));
    entry.num_outputs =
        static_cast<int64_t>(split.stages[s].graph->outputs()[0]->node()->inputs().size());
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

}  // namespace gpipe
