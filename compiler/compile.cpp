#include "compiler/compile.h"

#include <filesystem>
#include <sstream>

#include "compiler/model_loader.h"
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

CompileReport CompileModel(const std::string& model_path, const std::string& output_path,
                           const CompileOptions& options) {
  TORCH_CHECK(options.chunks >= 1, "--chunks is ", options.chunks, "; it must be at least 1");
  LoweredModel lowered = LowerModel(LoadModel(model_path));
  std::vector<DeferredBatchNorm> deferred;
  if (options.deferred_batch_norm) {
    deferred = DeferBatchNorm(lowered.graph, lowered.attributes, lowered.num_inputs);
  }
  std::vector<PartitionUnit> units = FindPartitionUnits(lowered.graph);
  StagePlan plan = options.split_before.empty()
                       ? PlanStages(units, options.balance)
                       : PlanSplitBefore(lowered.graph, options.split_before);
  const size_t num_stages = plan.num_stages();
  std::vector<std::string> devices = options.devices;
  if (devices.empty()) devices.assign(num_stages, "cpu");
  TORCH_CHECK(devices.size() == num_stages, "--devices lists ", devices.size(),
              " devices but there are ", num_stages, " stages; give one device per stage");
  for (const auto& d : devices) ParseDevice(d);  // fail before the work, not at run time

  SplitResult split = SplitStages(lowered.graph, plan, lowered.num_inputs);

  CompileReport report;
  Manifest& manifest = report.manifest;
  manifest.source_model = std::filesystem::path(model_path).filename().string();
  manifest.input_names = lowered.input_names;
  manifest.chunks = options.chunks;
  manifest.checkpoint = options.checkpoint;
  manifest.deferred_batch_norm = !deferred.empty();
  for (const auto& ref : split.model_outputs) manifest.outputs.push_back(ToSource(ref));

  std::vector<ArtifactRecord> records;
  size_t unit = 0;
  for (size_t s = 0; s < num_stages; ++s) {
    BuiltStage built = BuildStageModule(split.stages[s], lowered.attributes, s, deferred);
    StageEntry entry;
    entry.file = "stage_" + std::to_string(s) + ".pt";
    entry.device = devices[s];
    size_t end_node = s + 1 < num_stages ? plan.first_node[s + 1] : SIZE_MAX;
    int64_t count = 0;
    for (; unit < units.size() && units[unit].begin < end_node; ++unit, ++count) {
      entry.units.push_back(units[unit].name);
    }
    report.balance.push_back(count);
    for (const auto& ref : split.stages[s].activation_inputs) entry.inputs.push_back(ToSource(ref));
    entry.num_outputs = static_cast<int64_t>(
        split.stages[s].graph->outputs()[0]->node()->inputs().size());
    entry.uses_rng = built.uses_rng;
    entry.parameters = built.parameters;
    int64_t elements = 0;
    for (const auto& p : built.module.parameters()) elements += p.numel();
    report.parameter_counts.push_back(elements);
    std::ostringstream bytes;
    built.module.save(bytes);
    records.push_back({entry.file, bytes.str()});
    manifest.stages.push_back(std::move(entry));
  }
  for (const auto& u : units) report.unit_names.push_back(u.name);
  WriteArtifact(output_path, manifest, records);
  return report;
}

}  // namespace gpipe
