#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/checkpoint_mode.h"
#include "runtime/model_interface.h"

namespace gpipe {

// The versioned description of a pipelined artifact (docs/artifact-format.md).
// Plain data: parsing and validation live in manifest.cpp so that the loader,
// the writer and the fuzzer share one definition.

constexpr int64_t kManifestFormatVersion = 1;

// Where a value comes from: a model input or an output of an earlier stage.
struct ValueSource {
  enum class Origin { ModelInput, StageOutput };
  Origin origin = Origin::ModelInput;
  int64_t stage = 0;  // producing stage (StageOutput only)
  int64_t index = 0;  // model input index, or index in the producing stage's outputs
};

struct ParameterEntry {
  std::string name;      // attribute name inside the stage module (an identifier)
  std::string original;  // dotted name in the original model, e.g. "3.weight"
  bool is_buffer = false;
};

struct StageEntry {
  std::string file;    // archive record holding the stage's TorchScript module
  std::string device;  // "cpu", "cuda:1", ...
  std::vector<std::string> units;  // partition units (submodule names) the stage holds
  std::vector<ValueSource> inputs;
  int64_t num_outputs = 0;
  bool uses_rng = false;  // has a nondeterministic op: takes turns on the shared generator
  std::vector<int64_t> mutated_inputs;  // inputs the stage writes to in place: passed as copies
  int64_t rank = -1;  // process running the stage with --distributed (-1: one stage per rank)
  std::vector<ParameterEntry> parameters;
  // With --activation-budget: what the stage's recompute plan keeps per
  // micro-batch (its outputs and saved products) and the product FLOPs it
  // recomputes, measured on the compile-time sample.
  std::optional<int64_t> planned_kept_bytes;
  std::optional<double> planned_recompute_flops;
};

struct Manifest {
  int64_t format_version = kManifestFormatVersion;
  std::string source_model;
  std::vector<std::string> input_names;
  // The original forward's arguments, one per input (artifacts from before
  // they were recorded: type "Any", no defaults, no samples).
  std::vector<ForwardArgument> arguments;
  std::vector<ValueSource> outputs;  // the tensor leaves of what forward returns
  OutputStructure output_structure;  // how they nest (absent: one output, or a tuple)
  int64_t chunks = 1;
  CheckpointMode checkpoint = CheckpointMode::ExceptLast;
  // train_step's order of work (BuildSchedule's names; absent in older artifacts: gpipe).
  std::string schedule = "gpipe";
  int64_t virtual_stages = 1;
  bool deferred_batch_norm = false;  // stages commit batch-norm statistics once per mini-batch
  // Which products each stage's recompute plan keeps: absent, the selective
  // policy's (products with a weight); present, the ones chosen to fit this
  // many MiB per stage and micro-batch in flight (gpipe-compile --activation-budget).
  std::optional<double> activation_budget_mib;
  std::vector<StageEntry> stages;
  // How the cuts were chosen: "units" (--stages/--balance), "split-before",
  // "time" or "size" (profiled), with every unit's name and, when profiled,
  // its cost (ms or bytes), so that gpipe-inspect can show why a cut is where it is.
  std::string balance_method = "units";
  std::vector<std::string> unit_names;
  std::vector<double> unit_costs;
};

std::string ManifestToJson(const Manifest& manifest);

// Parses and validates; every problem is a c10::Error naming the field.
Manifest ParseManifest(const std::string& json_text);

// Structural checks shared by the parser and the writer: references point
// backwards to existing stages/outputs, names are safe, counts positive.
void ValidateManifest(const Manifest& manifest);

}  // namespace gpipe
