#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/compile_options.h"
#include "runtime/manifest.h"

namespace gpipe {

struct CompileReport {
  std::vector<double> unit_costs;  // when balanced by time (ms) or size (bytes)
  std::vector<double>
      measured_stage_ms;  // time balance with calibration: the chosen stages, measured
  std::vector<double> calibration_ratios;  // measured max/mean stage time of each plan tried
  Manifest manifest;
  std::vector<std::string> unit_names;    // all units of the model, in order
  std::vector<double> unit_weights;       // their static work estimates (OpWeight)
  bool units_chosen = false;              // granularity chosen automatically (no --unit-depth)
  std::vector<std::string> specialized;   // arguments fixed to their defaults, as "attn_mask=None"
  std::vector<int64_t> balance;           // units per stage, as chosen
  std::vector<int64_t> parameter_counts;  // elements per stage
};

// Loads `model_path`, splits it and writes the artifact to `output_path`
// (atomically). Throws c10::Error with a message naming the problem and fix.
CompileReport CompileModel(const std::string& model_path, const std::string& output_path,
                           const CompileOptions& options);

}  // namespace gpipe
