#include "runtime/pipeline.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <sstream>

#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>

#include "runtime/artifact.h"
#include "runtime/keyed_random.h"
#include "runtime/model_export.h"
#include "runtime/peer_group.h"
#include "runtime/pipeline_backward.h"
#include "runtime/pipeline_core.h"
#include "runtime/pipeline_error.h"
#include "runtime/pipeline_run.h"
#include "runtime/schedule_csv.h"
#include "runtime/schedule_validate.h"
#include "runtime/stage_placement.h"
#include "runtime/torch_compat.h"

namespace gpipe {
namespace {

// What every rank must agree on: the artifact (weights aside) and the options
// that shape the schedule. Devices may differ between hosts.
std::string Fingerprint(Manifest manifest, const RankPlan& ranks) {
  for (auto& stage : manifest.stages) stage.device.clear();
  std::string text = ManifestToJson(manifest) + "ranks:";
  for (int r : ranks.rank_of_stage()) text += std::to_string(r) + ",";
  return text;
}

// Rank 0 receives the serialized stages of every other rank (sizes first).
void GatherOnRankZero(PeerGroup& peers, const RankPlan& ranks, std::vector<ArtifactRecord>& records) {
  for (size_t s = 0; s < records.size(); ++s) {
    const int owner = ranks.rank_of(s);
    if (owner == 0 || (peers.rank() != 0 && peers.rank() != owner)) continue;
    const int message = ranks.SaveMessage(s);
    const std::string what = "stage " + std::to_string(s) + "'s weights for the saved artifact";
    at::Tensor size = at::zeros({1}, at::kLong);
    if (peers.rank() == owner) {
      const std::string& bytes = records[s].bytes;
      size.fill_(static_cast<int64_t>(bytes.size()));
      at::Tensor data = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
      std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
      peers.Send(size, 0, 2 * message, what);
      peers.Send(data, 0, 2 * message + 1, what);
    } else {
      peers.Recv(size, owner, 2 * message, what);
      at::Tensor data = at::empty({size.item<int64_t>()}, at::kByte);
      peers.Recv(data, owner, 2 * message + 1, what);
      records[s].bytes.assign(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(data.numel()));
    }
  }
  peers.WaitSends();
}

}  // namespace

Pipeline::Pipeline(std::shared_ptr<PipelineCore> core) : core_(std::move(core)) {}

Pipeline Pipeline::load(const std::string& path, const PipelineOptions& options) {
  auto opened = std::make_shared<const ArtifactReader>(path);
  const ArtifactReader& reader = *opened;
  auto core = std::make_shared<PipelineCore>();
  core->manifest = reader.manifest();
  // Kept open while the source model is needed: save() copies it into every
  // checkpoint (an open file reads as it was even if `path` is replaced).
  if (reader.HasRecord(kSourceModelRecord)) core->source_artifact = opened;
  Manifest& manifest = core->manifest;
  const size_t num_stages = manifest.stages.size();
  if (!options.devices.empty()) {
    TORCH_CHECK(options.devices.size() == num_stages, "--devices lists ", options.devices.size(),
                " devices but the artifact has ", num_stages, " stages; give one device per stage");
    for (size_t s = 0; s < num_stages; ++s) manifest.stages[s].device = options.devices[s];
  }
  if (options.chunks) manifest.chunks = *options.chunks;
  if (options.checkpoint) manifest.checkpoint = *options.checkpoint;
  TORCH_CHECK(manifest.chunks >= 1, "chunks is ", manifest.chunks, "; it must be at least 1");
  core->chunks = manifest.chunks;
  core->detect_anomaly = options.detect_anomaly;
  core->batch_weight_gradients = options.batch_weight_gradients;
  core->copies = std::make_unique<CopyStreams>(options.copy_streams);
  core->checkpoint = manifest.checkpoint;
  core->schedule = options.schedule.value_or(manifest.schedule);
  core->virtual_stages =
      options.virtual_stages.value_or(static_cast<size_t>(manifest.virtual_stages));
  // Refuse a schedule that cannot run these stages before the first step.
  if (IsScheduleFile(core->schedule)) {
    core->planned_schedule = LoadSchedule(core->schedule, num_stages, 0, 1);
    const size_t planned = core->planned_schedule->num_micro_batches;
    TORCH_CHECK(planned == static_cast<size_t>(core->chunks), "schedule file ", core->schedule,
                " plans ", planned, " micro-batches, but the pipeline splits each batch into ",
                core->chunks, "; run with --chunks ", planned, " or plan ", core->chunks,
                " micro-batches");
    try {
      ValidateSchedule(*core->planned_schedule);
    } catch (const std::invalid_argument& e) {
      TORCH_CHECK(false, core->schedule, ": ", e.what());
    }
  } else {
    CheckScheduleFits(core->schedule, num_stages, static_cast<size_t>(core->chunks),
                      core->virtual_stages);
  }
  TORCH_CHECK(options.ranks.empty() || options.peers, "--ranks assigns stages to processes; it needs --distributed");
  if (options.peers) {
    core->peers = options.peers;
    core->ranks = RankPlan(manifest, options.peers->rank(), options.peers->size(), options.ranks);
  }
  for (size_t s = 0; s < num_stages; ++s) {
    const StageEntry& entry = manifest.stages[s];
    Stage stage;
    stage.index = s;
    stage.inputs = entry.inputs;
    stage.num_outputs = entry.num_outputs;
    stage.uses_rng = entry.uses_rng;
    if (!core->ranks.IsLocal(s)) {  // another process loads and runs it
      core->stages.push_back(std::move(stage));
      continue;
    }
    stage.device = ParseDevice(entry.device);
    stage.module = LoadStageModule(reader, path, s, stage.device);
    if (auto unkeyed = FirstUnkeyedRandomOp(*stage.module.get_method("forward").graph())) {
      TORCH_CHECK(false, "'", path, "' was compiled by an older gpipe-compile: stage ", s, "'s ",
                  *unkeyed,
                  " draws from the shared generator instead of a keyed one, which this runtime "
                  "no longer runs; compile the model again");
    }
    stage.mutated_inputs = entry.mutated_inputs;
    stage.parameters = entry.parameters;
    stage.commits_batch_norm = stage.module.find_method(kCommitBatchNormMethod).has_value();
    stage.plan_budget_mib = manifest.activation_budget_mib;
    stage.CheckRecomputePlan(core->checkpoint, path);
    core->stages.push_back(std::move(stage));
  }
  TORCH_CHECK(options.threads_per_stage >= -1, "threads per stage is ", options.threads_per_stage,
              "; use a positive count, 0 (automatic) or -1 (LibTorch's default)");
  const int processes_per_machine = options.peers ? options.peers->options().local_world_size : 1;
  core->flow = StageFlowOf(core->manifest);
  WorkerAssignment assignment =
      AssignWorkers(core->stages, core->ranks, options.threads_per_stage, processes_per_machine,
                    options.one_worker, options.share_cpu_threads, core->workers);
  core->worker_of_stage = std::move(assignment.worker_of_stage);
  core->shared_threads = assignment.shared_threads;
  if (core->peers) {
    core->peers->CheckSameAsRankZero("an artifact or options (chunks, checkpoint, --ranks)",
                                     Fingerprint(manifest, core->ranks));
    // NCCL pairs messages by order: two stages' threads on one rank could interleave theirs.
    std::vector<int> stages_of_rank(static_cast<size_t>(core->peers->size()), 0);
    for (size_t s = 0; s < num_stages; ++s) ++stages_of_rank[static_cast<size_t>(core->ranks.rank_of(s))];
    for (size_t r = 0; r < stages_of_rank.size(); ++r) {
      TORCH_CHECK(!core->peers->nccl_device() || stages_of_rank[r] <= 1, "rank ", r, " runs ", stages_of_rank[r],
                  " stages, but NCCL needs one stage per rank (it matches messages by order, and two stages "
                  "would interleave theirs); start one rank per stage, or use --backend gloo");
    }
  }
  return Pipeline(std::move(core));
}

at::Tensor Pipeline::forward(const at::Tensor& input) {
  TORCH_CHECK(core_->manifest.outputs.size() == 1, "this model returns ",
              core_->manifest.outputs.size(), " values; call forward(std::vector<IValue>)");
  return forward(std::vector<c10::IValue>{input}).at(0);
}

std::shared_ptr<PipelineRun> Pipeline::StartRun(std::vector<c10::IValue> inputs, bool needs_grad) {
  const Manifest& manifest = core_->manifest;
  TORCH_CHECK(inputs.size() == manifest.input_names.size(), "the model takes ",
              manifest.input_names.size(), " inputs but forward got ", inputs.size());
  CheckArguments(manifest.arguments, inputs);
  // Keys for this run's random draws: the seed torch::manual_seed set, and a
  // step that every run (on every rank alike) advances.
  const DrawKey draws{at::detail::getDefaultCPUGenerator().current_seed(),
                      core_->next_draw_step++, 0};
  return std::make_shared<PipelineRun>(core_, Scatter(inputs, core_->chunks, manifest.arguments),
                                       needs_grad, draws);
}

// Deferred batch norm: the whole mini-batch's statistics, folded in once.
void Pipeline::CommitDeferredBatchNorm() {
  at::NoGradGuard no_grad;
  for (auto& stage : core_->stages) {
    if (stage.commits_batch_norm && stage.module.is_training())
      stage.module.run_method(kCommitBatchNormMethod);
  }
}

std::shared_ptr<PipelineRun> Pipeline::RunForward(std::vector<c10::IValue> inputs, bool needs_grad,
                                                  std::vector<at::Tensor>& outputs) {
  const Manifest& manifest = core_->manifest;
  auto run = StartRun(inputs, needs_grad);
  try {
    run->Forward();
  } catch (const std::exception&) {
    // A shape the model was not compiled for: say which input, not where deep inside it failed.
    if (auto mismatch = DescribeMismatch(manifest.arguments, inputs)) TORCH_CHECK(false, *mismatch);
    throw;
  }
  CommitDeferredBatchNorm();
  if (!core_->ranks.HoldsOutputs()) return run;
  at::NoGradGuard no_grad;  // gather outside the stage graphs
  for (size_t k = 0; k < manifest.outputs.size(); ++k) {
    auto parts = run->OutputParts(k);
    size_t none = 0;
    for (auto& p : parts) {
      none += !p.defined();
      if (p.defined()) p = p.detach();
    }
    TORCH_CHECK(none == 0 || none == parts.size(), "model output ", k, " is None for some micro-batches and a "
                "tensor for others; a pipelined model must return the same kind of value for every micro-batch");
    if (none > 0) {
      outputs.emplace_back();  // None
      continue;
    }
    at::Tensor gathered = Gather(parts);
    // A fresh variable even for one micro-batch, so that it can own the
    // pipeline's autograd node instead of the stage's.
    outputs.push_back(torch::autograd::make_variable(gathered.tensor_data(), false));
  }
  return run;
}

std::vector<at::Tensor> Pipeline::forward(const std::vector<c10::IValue>& args, const Kwargs& kwargs) {
  std::vector<c10::IValue> inputs = BindArguments(core_->manifest.arguments, args, kwargs);
  TORCH_CHECK(!core_->peers || !at::GradMode::is_enabled(),
              "forward() of a multi-process pipeline runs inference only: call it under "
              "torch::NoGradGuard, and train with train_step(), which runs every rank's backward");
  bool needs_grad = false;
  if (at::GradMode::is_enabled()) {
    for (const auto& v : inputs) needs_grad = needs_grad || (v.isTensor() && v.toTensor().requires_grad());
    for (const auto& p : parameters()) needs_grad = needs_grad || p.requires_grad();
  }
  std::vector<at::Tensor> outputs;
  auto run = RunForward(inputs, needs_grad, outputs);
  if (needs_grad) AttachBackward(run, inputs, outputs);
  return outputs;
}

c10::IValue Pipeline::operator()(const std::vector<c10::IValue>& args, const Kwargs& kwargs) {
  std::vector<at::Tensor> outputs = forward(args, kwargs);
  if (!core_->ranks.HoldsOutputs()) return c10::IValue();
  return RebuildOutput(core_->manifest.output_structure, outputs);
}

uint64_t Pipeline::draw_step() const { return core_->next_draw_step; }
void Pipeline::set_draw_step(uint64_t step) { core_->next_draw_step = step; }

const std::vector<ForwardArgument>& Pipeline::signature() const { return core_->manifest.arguments; }

std::vector<std::pair<std::string, at::Tensor>> Pipeline::named_tensors(bool buffers) const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& stage : core_->stages) {
    if (!core_->ranks.IsLocal(stage.index)) continue;
    for (const auto& p : stage.parameters) {
      if (p.is_buffer != buffers) continue;
      out.emplace_back(p.original, stage.module.attr(p.name).toTensor());
    }
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Pipeline::named_parameters() const {
  return named_tensors(false);
}

std::vector<std::pair<std::string, at::Tensor>> Pipeline::named_buffers() const {
  return named_tensors(true);
}

std::vector<at::Tensor> Pipeline::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& named : named_parameters()) out.push_back(named.second);
  return out;
}

void Pipeline::train(bool on) {
  for (auto& stage : core_->stages) {
    if (core_->ranks.IsLocal(stage.index)) stage.module.train(on);
  }
}

bool Pipeline::is_training() const {
  for (const auto& stage : core_->stages) {
    if (core_->ranks.IsLocal(stage.index)) return stage.module.is_training();
  }
  return false;
}

void Pipeline::save(const std::string& path) const { save(path, {}); }

void Pipeline::save(const std::string& path, const std::vector<ArtifactRecord>& extra) const {
  TORCH_CHECK(extra.empty() || !core_->peers, "extra records in a checkpoint of several processes are not written");
  Manifest manifest = core_->manifest;
  manifest.chunks = core_->chunks;
  manifest.checkpoint = core_->checkpoint;
  std::vector<ArtifactRecord> records;
  for (size_t s = 0; s < core_->stages.size(); ++s) {
    std::ostringstream bytes;
    if (core_->ranks.IsLocal(s)) core_->stages[s].module.save(bytes);
    records.push_back({manifest.stages[s].file, bytes.str()});
  }
  records.insert(records.end(), extra.begin(), extra.end());
  auto add_source_model = [&] {
    if (core_->source_artifact) {
      records.push_back(
          {kSourceModelRecord, core_->source_artifact->ReadRecord(kSourceModelRecord)});
    }
  };
  if (!core_->peers) {
    add_source_model();
    WriteArtifact(path, manifest, records);
    return;
  }
  GatherOnRankZero(*core_->peers, core_->ranks, records);
  if (core_->peers->rank() == 0) {
    add_source_model();
    WriteArtifact(path, manifest, records);
  }
  core_->peers->Barrier("rank 0 to write " + path);
}

void Pipeline::set_tracing(bool on) { core_->trace.set_enabled(on); }
std::vector<TaskRecord> Pipeline::take_trace() { return core_->trace.Take(); }
std::vector<std::string> Pipeline::worker_names() const {
  std::vector<std::string> names;
  for (const auto& w : core_->workers) names.push_back(w->name());
  return names;
}

size_t Pipeline::num_stages() const { return core_->stages.size(); }
size_t Pipeline::num_local_stages() const {
  size_t n = 0;
  for (size_t s = 0; s < core_->stages.size(); ++s) n += core_->ranks.IsLocal(s);
  return n;
}
bool Pipeline::holds_outputs() const { return core_->ranks.HoldsOutputs(); }
int64_t Pipeline::chunks() const { return core_->chunks; }
void Pipeline::set_chunks(int64_t chunks) {
  TORCH_CHECK(chunks >= 1, "chunks is ", chunks, "; it must be at least 1");
  core_->chunks = chunks;
}
CheckpointMode Pipeline::checkpoint() const { return core_->checkpoint; }
void Pipeline::set_checkpoint(CheckpointMode mode) {
  for (const Stage& stage : core_->stages) {
    if (core_->ranks.IsLocal(stage.index)) stage.CheckRecomputePlan(mode, "this artifact");
  }
  core_->checkpoint = mode;
}
const Manifest& Pipeline::manifest() const { return core_->manifest; }
const std::string& Pipeline::schedule() const { return core_->schedule; }

std::optional<std::string> Pipeline::ScheduleMisfit(int64_t micro_batches) const {
  const size_t m = static_cast<size_t>(micro_batches);
  if (core_->planned_schedule) {
    if (core_->planned_schedule->num_micro_batches == m) return std::nullopt;
    const std::string planned = std::to_string(core_->planned_schedule->num_micro_batches);
    return "schedule file " + core_->schedule + " plans " + planned + " micro-batches, not " +
           std::to_string(m) + "; use --chunks " + planned + " and batches of at least " + planned +
           " rows";
  }
  try {
    core_->ScheduleFor(core_->schedule, m);  // built and validated once per count
  } catch (const std::invalid_argument& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace gpipe
