#include "compiler/model_loader.h"

#include <filesystem>

#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "passes/inline_module_calls.h"
#include "passes/scalarize_containers.h"

namespace gpipe {

torch::jit::Module LoadModel(const std::string& path) {
  TORCH_CHECK(std::filesystem::exists(path), "model file '", path,
              "' does not exist; export one with torch.jit.script(model).save('", path, "')");
  TORCH_CHECK(std::filesystem::is_regular_file(path), "model path '", path, "' is not a file");
  try {
    return torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "cannot load '", path, "' as a TorchScript model (",
                e.what_without_backtrace(), "); export it with torch.jit.script(model).save(...) "
                "or torch.jit.trace(model, example).save(...)");
  }
}

LoweredModel LowerModel(const torch::jit::Module& module) {
  TORCH_CHECK(module.find_method("forward"), "the model has no forward method");
  LoweredModel lowered;
  lowered.module = module;
  lowered.graph = module.get_method("forward").graph()->copy();
  InlineModuleCalls(*lowered.graph);  // records "layers.0", not "0", for a ModuleList element
  torch::jit::Inline(*lowered.graph);  // anything left (nothing, normally)
  lowered.num_inputs = lowered.graph->inputs().size() - 1;  // minus self
  for (size_t k = 1; k < lowered.graph->inputs().size(); ++k) {
    lowered.input_names.push_back(lowered.graph->inputs()[k]->debugName());
  }
  lowered.attributes = LiftAttributes(lowered.graph, module._ivalue());
  // `return a, b` ends in a TupleConstruct: its elements become the outputs,
  // so that each can live on (and be gathered from) the stage that makes it.
  auto& graph = lowered.graph;
  if (graph->outputs().size() == 1 && graph->outputs()[0]->node()->kind() == c10::prim::TupleConstruct) {
    torch::jit::Node* tuple = graph->outputs()[0]->node();
    graph->eraseOutput(0);
    for (torch::jit::Value* element : tuple->inputs()) graph->registerOutput(element);
  }
  torch::jit::ConstantPropagation(lowered.graph);
  torch::jit::EliminateDeadCode(lowered.graph);
  // Lists and dicts filled in straight-line code (DenseNet's features, a
  // segmentation backbone's outputs) would otherwise tie every unit between
  // their uses into one: only tensors and plain values cross stages.
  ScalarizeContainers(lowered.graph);
  return lowered;
}

}  // namespace gpipe
