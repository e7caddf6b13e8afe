#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/stage_plan.h"
#include "runtime/checkpoint_mode.h"
#include "runtime/manifest.h"

namespace gpipe {

struct CompileOptions {
  BalanceRequest balance;
  std::vector<std::string> split_before;  // submodule paths; when given, replaces `balance`
  int64_t chunks = 1;
  CheckpointMode checkpoint = CheckpointMode::ExceptLast;
  std::vector<std::string> devices;  // one per stage; empty = all "cpu"
  bool deferred_batch_norm = false;  // running statistics from the whole mini-batch
};

struct CompileReport {
  Manifest manifest;
  std::vector<std::string> unit_names;  // all units of the model, in order
  std::vector<int64_t> balance;         // units per stage, as chosen
  std::vector<int64_t> parameter_counts;  // elements per stage
};

// Loads `model_path`, splits it and writes the artifact to `output_path`
// (atomically). Throws c10::Error with a message naming the problem and fix.
CompileReport CompileModel(const std::string& model_path, const std::string& output_path,
                           const CompileOptions& options);

}  // namespace gpipe
