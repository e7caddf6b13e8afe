#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/script.h>

#include "runtime/checkpoint_mode.h"
#include "runtime/manifest.h"

namespace gpipe {

class ArtifactReader;

// One pipeline stage as loaded: its TorchScript module (which owns exactly
// the stage's parameters), the device it runs on and where its inputs come
// from. Runs the module; knows nothing about scheduling.
struct Stage {
  size_t index = 0;
  torch::jit::Module module;
  c10::Device device = c10::Device(c10::kCPU);
  std::vector<ValueSource> inputs;
  int64_t num_outputs = 0;
  bool uses_rng = false;  // contains a nondeterministic op (dropout, ...)
  std::vector<ParameterEntry> parameters;
  bool commits_batch_norm = false;  // has kCommitBatchNormMethod (deferred batch norm)
  std::vector<int64_t> mutated_inputs;  // written in place by forward: Run passes copies
  // The budget its recompute plan was chosen for (manifest's activation_budget_mib);
  // absent: the selective plan.
  std::optional<double> plan_budget_mib;

  // Runs forward on one micro-batch; returns exactly num_outputs values.
  // Inputs listed in mutated_inputs are copied first, so that the caller's
  // tensors (autograd leaves, values kept for a recompute) stay as they were.
  std::vector<c10::IValue> Run(std::vector<c10::IValue> inputs);

  // Selective checkpointing, from the two methods gpipe-compile's recompute
  // plan adds (passes/split_for_recompute.h): a forward that also returns
  // the values backward reads saved, and the recompute that reads them.
  bool HasRecomputePlan() const;
  // Throws naming the fix when `mode` runs the recompute plan and this stage,
  // compiled by an older gpipe-compile, has none, or when the plan was made
  // for the other policy (selective vs --activation-budget).
  void CheckRecomputePlan(CheckpointMode mode, const std::string& path) const;
  struct SavingRun {
    std::vector<c10::IValue> outputs;
    std::vector<c10::IValue> saved;
  };
  SavingRun RunSaving(std::vector<c10::IValue> inputs);
  std::vector<c10::IValue> Recompute(std::vector<c10::IValue> inputs,
                                     const std::vector<c10::IValue>& saved);

 private:
  std::vector<c10::IValue> RunMethod(const char* method, std::vector<c10::IValue> inputs,
                                     size_t num_results);
};

constexpr const char* kCommitBatchNormMethod = "gpipe_commit_batch_norm";
constexpr const char* kForwardSavingMethod = "gpipe_forward_saving";
constexpr const char* kRecomputeMethod = "gpipe_recompute";

// Parses "cpu", "cuda", "cuda:1"; checks the device exists in this build.
c10::Device ParseDevice(const std::string& text);

// Stage `index`'s module from its record of the artifact at `path`, on
// `device`: one line naming the stage if the record is no TorchScript module
// or lacks a tensor the manifest lists. Its methods run on graph executors
// that plan per argument signature, so that a graph computes alike however
// often it has run (a resumed process trains bitwise as the uninterrupted one).
torch::jit::Module LoadStageModule(const ArtifactReader& reader, const std::string& path,
                                   size_t index, const c10::Device& device);

}  // namespace gpipe
