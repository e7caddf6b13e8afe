#pragma once

// Small TorchScript modules built in C++ for the pass tests: enough structure
// (submodules, parameters, buffers, plain attributes, the training flag) to
// exercise lifting and unit discovery without exporting from Python.

#include <string>

#include <torch/script.h>

namespace gpipe::testing {

inline torch::jit::Module ScaleModule(const std::string& class_name, float weight) {
  torch::jit::Module m(c10::QualifiedName("__torch__." + class_name));
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("weight", torch::full({2}, weight), false);
  m.register_buffer("scale", torch::ones({2}));
  m.register_attribute("alpha", c10::FloatType::get(), 0.5);
  m.define(R"(
    def forward(self, x):
        return x * self.weight * self.scale * self.alpha
  )");
  return m;
}

// forward = `body`, children registered under the given names.
inline torch::jit::Module ParentModule(
    const std::string& class_name,
    const std::vector<std::pair<std::string, torch::jit::Module>>& children,
    const std::string& body) {
  torch::jit::Module m(c10::QualifiedName("__torch__." + class_name));
  m.register_attribute("training", c10::BoolType::get(), true);
  for (const auto& [name, child] : children) m.register_module(name, child);
  m.define(body);
  return m;
}

inline std::shared_ptr<torch::jit::Graph> InlinedForward(const torch::jit::Module& m);

}  // namespace gpipe::testing

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/inliner.h>

namespace gpipe::testing {
inline std::shared_ptr<torch::jit::Graph> InlinedForward(const torch::jit::Module& m) {
  auto graph = m.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  return graph;
}

template <typename Units>
std::vector<std::string> UnitNames(const Units& units) {
  std::vector<std::string> names;
  for (const auto& u : units) names.push_back(u.name);
  return names;
}

inline std::shared_ptr<torch::jit::Graph> ParseGraph(const std::string& ir) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}
}  // namespace gpipe::testing
