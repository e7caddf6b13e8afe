#include "compiler/profiler.h"

#include <algorithm>
#include <boost/filesystem.hpp>

#include <stdlib.h>

#include <torch/torch.h>

#include "runtime/memory_tracker.h"
#include "runtime/pipeline.h"

namespace gpipe {
namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

// A fresh directory under the system's temporary directory, removed with
// everything in it however profiling ends.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    std::string pattern =
        (boost::filesystem::temp_directory_path() / "gpipe-profile-XXXXXX").string();
    TORCH_CHECK(mkdtemp(pattern.data()) != nullptr, "cannot create a scratch directory under ",
                boost::filesystem::temp_directory_path().string(),
                " for profiling; set TMPDIR to a writable one");
    path_ = pattern;
  }
  ~ScratchDirectory() {
    boost::system::error_code ignored;
    boost::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  boost::filesystem::path path_;
};

}  // namespace

namespace {

struct StageMeasurements {
  std::vector<double> forward_ms, backward_ms, kept_bytes;
  std::vector<int64_t> parameter_bytes;
};

// Runs `plan` through the runtime with one micro-batch (tasks never overlap),
// one warm-up and options.profile_steps measured steps; medians per stage.
StageMeasurements MeasureStages(const LoweredProgram& program, const StagePlan& plan,
                                const CompileOptions& options, const std::string& what) {
  TORCH_CHECK(!options.sample_inputs.empty(), "--balance-by needs --sample-input to profile on");
  TORCH_CHECK(options.profile_steps >= 1, "--profile-steps must be at least 1");
  const size_t n = plan.num_stages();
  CompileOptions profiling = options;
  profiling.chunks = 1;
  profiling.checkpoint = CheckpointMode::Never;
  profiling.activation_budget_mib.reset();  // the profile needs no recompute plan
  profiling.devices.clear();
  BuiltPipeline built = BuildPipeline(program, plan, profiling);
  ScratchDirectory scratch;
  WriteArtifact(scratch.file("profile.gpipe"), built.manifest, built.records);
  Pipeline pipe = Pipeline::load(scratch.file("profile.gpipe"));

  MemoryTracker::Enable();
  pipe.train();
  pipe.set_tracing(true);
  torch::manual_seed(0);
  std::vector<c10::IValue> inputs = MakeSampleInputs(options.sample_inputs, program.lowered.arguments);
  const size_t steps = static_cast<size_t>(options.profile_steps) + 1;  // + warm-up
  std::vector<std::vector<double>> forward(n), backward(n), kept(n);
  for (size_t step = 0; step < steps; ++step) {
    for (auto& p : pipe.parameters()) p.mutable_grad() = at::Tensor();
    auto before = MemoryTracker::CurrentBytes(n);
    std::vector<at::Tensor> outputs = pipe.forward(inputs);
    auto after = MemoryTracker::CurrentBytes(n);
    at::Tensor loss = torch::zeros({});
    for (const auto& o : outputs) {
      if (at::isFloatingType(o.scalar_type())) loss = loss + o.sum();
    }
    loss.backward();
    auto records = pipe.take_trace();
    if (step > 0) {
      for (const auto& r : records) {
        double ms = static_cast<double>(r.end_ns - r.start_ns) / 1e6;
        if (r.phase == TaskRecord::Phase::Forward) forward[r.stage].push_back(ms);
        if (r.phase == TaskRecord::Phase::Backward) backward[r.stage].push_back(ms);
      }
      for (size_t u = 0; u < n; ++u) kept[u].push_back(static_cast<double>(after[u] - before[u]));
    }
    if (options.progress) options.progress(what, step + 1, steps);
  }
  pipe.set_tracing(false);
  StageMeasurements m;
  for (size_t u = 0; u < n; ++u) {
    m.forward_ms.push_back(Median(forward[u]));
    m.backward_ms.push_back(Median(backward[u]));
    m.kept_bytes.push_back(std::max(0.0, Median(kept[u])));
  }
  m.parameter_bytes = built.parameter_bytes;
  return m;
}

StagePlan OnePerUnit(const std::vector<PartitionUnit>& units) {
  StagePlan plan;
  for (const auto& u : units) plan.first_node.push_back(u.begin);
  return plan;
}

}  // namespace

UnitProfile ProfileUnits(const LoweredProgram& program, const CompileOptions& options) {
  const std::vector<PartitionUnit>& units = program.units;
  StageMeasurements m = MeasureStages(program, OnePerUnit(units), options, "profiling units");
  UnitProfile profile;
  const double state_copies = options.adam ? 4.0 : 2.0;  // weights + grads (+ Adam's two moments)
  for (size_t u = 0; u < units.size(); ++u) {
    profile.forward_ms.push_back(m.forward_ms[u]);
    profile.backward_ms.push_back(m.backward_ms[u]);
    profile.time_ms.push_back(m.forward_ms[u] + m.backward_ms[u]);
    profile.parameter_bytes.push_back(static_cast<double>(m.parameter_bytes[u]));
    profile.activation_bytes.push_back(m.kept_bytes[u]);
    profile.bytes.push_back(profile.parameter_bytes[u] * state_copies + profile.activation_bytes[u]);
  }
  return profile;
}

std::vector<double> ProfileStageTimes(const LoweredProgram& program, const StagePlan& plan,
                                      const CompileOptions& options) {
  StageMeasurements m = MeasureStages(program, plan, options, "measuring stages");
  std::vector<double> times;
  for (size_t s = 0; s < plan.num_stages(); ++s) times.push_back(m.forward_ms[s] + m.backward_ms[s]);
  return times;
}

}  // namespace gpipe
