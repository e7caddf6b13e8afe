#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "passes/lift_attributes.h"
#include "runtime/model_interface.h"

namespace gpipe {

// The original model's forward as one flat graph: inlined, with parameters,
// buffers and the training flag lifted to inputs after the model inputs,
// and the returned value replaced by its tensor leaves (its structure kept
// in `output_structure`).
struct LoweredModel {
  torch::jit::Module module;
  std::shared_ptr<torch::jit::Graph> graph;
  size_t num_inputs = 0;                  // model inputs, before the lifted attributes
  std::vector<std::string> input_names;
  std::vector<ForwardArgument> arguments;  // forward's signature (no samples yet)
  OutputStructure output_structure;
  std::vector<LiftedAttribute> attributes;
};

// Loads a TorchScript .pt file; every failure names the file and the fix.
torch::jit::Module LoadModel(const std::string& path);

// Copy of forward, inlined, lifted, constant-propagated, containers
// scalarized, outputs flattened, dead code removed.
LoweredModel LowerModel(const torch::jit::Module& module);

// forward's arguments after `self`: names, TorchScript types, defaults.
std::vector<ForwardArgument> ForwardSignature(const torch::jit::Module& module);

}  // namespace gpipe
