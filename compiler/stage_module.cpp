#include "compiler/stage_module.h"

#include <cctype>

#include <torch/csrc/jit/api/compilation_unit.h>

namespace gpipe {
namespace {

std::string AttributeName(size_t index, const std::string& dotted) {
  std::string name = "p" + std::to_string(index) + "_";
  for (char c : dotted) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

bool UsesRng(const torch::jit::Block* block) {
  for (const torch::jit::Node* node : block->nodes()) {
    if (node->isNondeterministic()) return true;
    for (const torch::jit::Block* sub : node->blocks()) {
      if (UsesRng(sub)) return true;
    }
  }
  return false;
}

}  // namespace

BuiltStage BuildStageModule(const StageGraph& stage, const std::vector<LiftedAttribute>& attributes,
                            size_t stage_index) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  BuiltStage built;
  built.module = torch::jit::Module(
      c10::QualifiedName("__torch__.gpipe.Stage" + std::to_string(stage_index)), cu);
  torch::jit::Module& m = built.module;

  auto graph = stage.graph->copy();
  torch::jit::Value* self = graph->insertInput(0, "self")->setType(m._ivalue()->type());
  const size_t first_attribute = 1 + stage.activation_inputs.size();
  bool training = true;
  for (const auto& a : attributes) {
    if (a.kind == LiftedAttribute::Kind::TrainingFlag) training = a.value.toBool();
  }
  m.register_attribute("training", c10::BoolType::get(), training);
  {
    torch::jit::WithInsertPoint at_start(graph->block()->nodes().front());
    for (size_t k = 0; k < stage.attribute_inputs.size(); ++k) {
      const LiftedAttribute& a = attributes.at(stage.attribute_inputs[k]);
      std::string name = "training";
      if (a.kind != LiftedAttribute::Kind::TrainingFlag) {
        name = AttributeName(stage.attribute_inputs[k], a.name);
        bool is_buffer = a.kind == LiftedAttribute::Kind::Buffer;
        m.register_parameter(name, a.value.toTensor(), is_buffer);
        built.parameters.push_back({name, a.name, is_buffer});
      }
      torch::jit::Value* read = graph->insertGetAttr(self, name);
      graph->inputs()[first_attribute + k]->replaceAllUsesWith(read);
    }
  }
  for (size_t k = stage.attribute_inputs.size(); k > 0; --k) graph->eraseInput(first_attribute + k - 1);
  built.uses_rng = UsesRng(graph->block());

  auto fn = cu->create_function(c10::QualifiedName(*m.type()->name(), "forward"), graph);
  m.type()->addMethod(fn);
  return built;
}

}  // namespace gpipe
