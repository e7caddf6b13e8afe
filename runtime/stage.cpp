#include "runtime/stage.h"

#include <optional>
#include <sstream>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/cuda.h>

#include "runtime/artifact.h"
#include "runtime/executor_mode.h"

namespace gpipe {

std::vector<c10::IValue> Stage::RunMethod(const char* method, std::vector<c10::IValue> inputs,
                                          size_t num_results) {
  for (int64_t k : mutated_inputs) {
    auto& v = inputs.at(static_cast<size_t>(k));
    if (v.isTensor() && v.toTensor().defined()) v = v.toTensor().clone();
  }
  c10::IValue out = module.get_method(method)(std::move(inputs));
  TORCH_INTERNAL_ASSERT(out.isTuple(), "stage ", index, " must return a tuple");
  auto elements = out.toTupleRef().elements().vec();
  TORCH_CHECK(elements.size() == num_results, "stage ", index, " returned ", elements.size(),
              " values from ", method, " but the manifest says ", num_results,
              "; the artifact is inconsistent, compile it again");
  return elements;
}

std::vector<c10::IValue> Stage::Run(std::vector<c10::IValue> inputs) {
  return RunMethod("forward", std::move(inputs), static_cast<size_t>(num_outputs));
}

bool Stage::HasRecomputePlan() const {
  return module.find_method(kForwardSavingMethod).has_value() &&
         module.find_method(kRecomputeMethod).has_value();
}

void Stage::CheckRecomputePlan(CheckpointMode mode, const std::string& path) const {
  if (!RunsRecomputePlan(mode)) return;
  TORCH_CHECK(HasRecomputePlan(), "'", path, "' has no recompute plan for checkpoint mode '",
              ToString(mode), "' (stage ", index,
              " was compiled by an older gpipe-compile); compile the model again, or use "
              "always, except_last or never");
  TORCH_CHECK(mode != CheckpointMode::Budget || plan_budget_mib,
              "checkpoint mode 'budget' needs an "
              "artifact compiled with --activation-budget MiB, and '",
              path,
              "' keeps the selective plan; compile it with --activation-budget, or use selective");
  TORCH_CHECK(mode != CheckpointMode::Selective || !plan_budget_mib, "'", path,
              "' was compiled with --activation-budget ", *plan_budget_mib,
              " MiB, so its recompute plan is the budget's; use checkpoint mode budget, or compile "
              "without --activation-budget for selective");
}

Stage::SavingRun Stage::RunSaving(std::vector<c10::IValue> inputs) {
  // The saved values follow the outputs; how many, only the method knows.
  const size_t num_results = module.get_method(kForwardSavingMethod)
                                 .function()
                                 .getSchema()
                                 .returns()
                                 .at(0)
                                 .type()
                                 ->expectRef<c10::TupleType>()
                                 .elements()
                                 .size();
  auto results = RunMethod(kForwardSavingMethod, std::move(inputs), num_results);
  SavingRun run;
  run.saved.assign(results.begin() + num_outputs, results.end());
  results.resize(static_cast<size_t>(num_outputs));
  run.outputs = std::move(results);
  return run;
}

std::vector<c10::IValue> Stage::Recompute(std::vector<c10::IValue> inputs,
                                          const std::vector<c10::IValue>& saved) {
  inputs.insert(inputs.end(), saved.begin(), saved.end());
  return RunMethod(kRecomputeMethod, std::move(inputs), static_cast<size_t>(num_outputs));
}

c10::Device ParseDevice(const std::string& text) {
  std::optional<c10::Device> device;
  try {
    device = c10::Device(text);
  } catch (const c10::Error&) {
    TORCH_CHECK(false, "'", text, "' is not a device; use cpu, cuda or cuda:N");
  }
  TORCH_CHECK(device->is_cpu() || device->is_cuda(), "device '", text,
              "' is not supported; use cpu, cuda or cuda:N");
  if (device->is_cuda()) {
    TORCH_CHECK(torch::cuda::is_available(), "device '", text,
                "' needs CUDA, but this gpipe-cpp build or machine has none; use cpu");
    int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    TORCH_CHECK(!device->has_index() || device->index() < count, "device '", text,
                "' does not exist: this machine has ", count, " CUDA device(s)");
  }
  return *device;
}

namespace {

// Makes each method's graph executor now, as the executor that plans once
// per argument signature (ArgumentSpec: dtypes, devices, ranks,
// requires_grad, grad mode), rather than LibTorch's default profiling
// executor, whose plan for a graph changes after its first runs. With that
// one, a process's numerics depended on how often each graph had already
// run: a resumed run (a fresh process) computed the uninterrupted run's
// step in the last bits differently, so --resume was bitwise only as long
// as both happened to warm up alike. The mode is a process-wide flag read
// when an executor is made, so it is set only around making these.
void MakeSignatureKeyedExecutors(torch::jit::Module& module) {
  SignatureKeyedExecutorScope signature_keyed;
  for (const torch::jit::Method& method : module.get_methods()) {
    torch::jit::toGraphFunction(method.function()).get_executor();
  }
}

}  // namespace

torch::jit::Module LoadStageModule(const ArtifactReader& reader, const std::string& path,
                                   size_t index, const c10::Device& device) {
  const StageEntry& entry = reader.manifest().stages[index];
  std::istringstream bytes(reader.ReadRecord(entry.file));
  torch::jit::Module module;
  try {
    module = torch::jit::load(bytes, device);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "artifact '", path, "': stage ", index, " ('", entry.file,
                "') is not a loadable TorchScript module: ", e.what_without_backtrace());
  }
  for (const auto& p : entry.parameters) {
    TORCH_CHECK(module.hasattr(p.name), "artifact '", path, "': stage ", index, " lacks '", p.name,
                "' (", p.original, ") that the manifest lists; compile the model again");
  }
  MakeSignatureKeyedExecutors(module);
  return module;
}

}  // namespace gpipe
