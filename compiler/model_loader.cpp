#include "compiler/model_loader.h"

#include <boost/filesystem.hpp>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "passes/inline_module_calls.h"
#include "passes/key_random_ops.h"
#include "passes/scalarize_containers.h"

namespace gpipe {
namespace {

bool Recordable(const c10::IValue& v) {
  return v.isNone() || v.isBool() || v.isInt() || v.isDouble() || v.isString() || v.isIntList() ||
         v.isDoubleList() || v.isBoolList();
}

bool IsTensorLike(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::TensorType;
}

// The structure of what `v` is built from; its tensor leaves are appended
// to `leaves`. `path` names the value in errors ("out[1]", "out.logits").
OutputStructure Describe(torch::jit::Value* v, const std::string& path, std::vector<torch::jit::Value*>& leaves) {
  torch::jit::Node* node = v->node();
  OutputStructure s;
  auto children = [&](size_t first, size_t step, const std::vector<std::string>& names) {
    for (size_t k = first, n = 0; k < node->inputs().size(); k += step, ++n) {
      std::string child = names.empty() ? path + "[" + std::to_string(n) + "]"
                                        : (path == "out" ? names[n] : path + "." + names[n]);
      s.elements.push_back(Describe(node->input(k), child, leaves));
    }
  };
  if (node->kind() == c10::prim::TupleConstruct) {
    s.kind = OutputStructure::Kind::Tuple;
    auto tuple = v->type()->expect<c10::TupleType>();
    if (tuple->schema()) {  // a NamedTuple: its field names
      for (const auto& field : tuple->schema()->arguments()) s.keys.push_back(field.name());
    }
    children(0, 1, s.keys);
    return s;
  }
  if (node->kind() == c10::prim::ListConstruct) {
    s.kind = OutputStructure::Kind::List;
    children(0, 1, {});
    return s;
  }
  if (node->kind() == c10::prim::DictConstruct) {
    s.kind = OutputStructure::Kind::Dict;
    for (size_t k = 0; k < node->inputs().size(); k += 2) {
      auto key = torch::jit::toIValue(node->input(k));
      TORCH_CHECK(key && key->isString(), "forward returns ", path, ", a dict whose keys are not constant "
                  "strings; a pipeline returns dicts with fixed string keys (return a tuple instead)");
      s.keys.push_back(key->toStringRef());
    }
    children(1, 2, s.keys);
    return s;
  }
  if (node->kind() == c10::prim::Constant && !v->type()->cast<c10::TensorType>()) {
    auto value = torch::jit::toIValue(v);
    TORCH_CHECK(value && Recordable(*value), "forward returns ", path, ", a constant ", v->type()->annotation_str(),
                " the artifact cannot hold; return tensors, None, numbers or strings");
    s.kind = OutputStructure::Kind::Constant;
    s.constant = *value;
    return s;
  }
  TORCH_CHECK(IsTensorLike(v->type()), "forward returns ", path, " (", v->type()->annotation_str(),
              ") computed in forward", v->type()->cast<c10::ListType>() || v->type()->cast<c10::DictType>()
                  ? " in a way the compiler cannot follow (in a loop or branch); build it in straight-line code"
                  : "; a pipeline gathers tensors over micro-batches and cannot return it: return a tensor "
                    "instead, or drop it");
  s.leaf = leaves.size();
  leaves.push_back(v);
  return s;
}

// Replaces the graph's one return value by its tensor leaves.
OutputStructure FlattenReturn(torch::jit::Graph& graph) {
  TORCH_INTERNAL_ASSERT(graph.outputs().size() == 1);
  std::vector<torch::jit::Value*> leaves;
  OutputStructure structure = Describe(graph.outputs()[0], "out", leaves);
  TORCH_CHECK(!leaves.empty(), "forward returns no tensors (only constants); there is nothing to pipeline");
  graph.eraseOutput(0);
  for (torch::jit::Value* leaf : leaves) graph.registerOutput(leaf);
  return structure;
}

}  // namespace

torch::jit::Module LoadModel(const std::string& path) {
  TORCH_CHECK(boost::filesystem::exists(path), "model file '", path,
              "' does not exist; export one with torch.jit.script(model).save('", path, "')");
  TORCH_CHECK(boost::filesystem::is_regular_file(path), "model path '", path, "' is not a file");
  try {
    return torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {  // c10::Error, or torch::jit::ErrorReport from the script compiler
    auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    std::string why = c10_error ? c10_error->what_without_backtrace() : e.what();
    // A custom operator (torchvision's detection models use torchvision::nms):
    // the message is a multi-line TorchScript excerpt; name the operator instead.
    const std::string unknown = "Unknown builtin op: ";
    size_t at = why.find(unknown);
    if (at != std::string::npos) {
      std::string op = why.substr(at + unknown.size());
      op = op.substr(0, op.find_first_of(".\n "));
      TORCH_CHECK(false, "cannot load '", path, "': it calls the operator ", op, ", which LibTorch does not ",
                  "define (it comes from an extension library, e.g. torchvision's C++ ops); gpipe-cpp cannot ",
                  "load models that need extension operators yet");
    }
    TORCH_CHECK(false, "cannot load '", path, "' as a TorchScript model (", why,
                "); export it with torch.jit.script(model).save(...) "
                "or torch.jit.trace(model, example).save(...)");
  }
}

std::vector<ForwardArgument> ForwardSignature(const torch::jit::Module& module) {
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  std::vector<ForwardArgument> signature;
  for (size_t k = 1; k < schema.arguments().size(); ++k) {  // 0 is self
    const c10::Argument& a = schema.arguments()[k];
    ForwardArgument arg;
    arg.name = a.name();
    arg.type = a.type()->annotation_str();
    // A default the manifest cannot hold is not recorded: the argument must then be given.
    if (a.default_value() && Recordable(*a.default_value())) arg.default_value = *a.default_value();
    arg.batched = arg.is_tensor();
    signature.push_back(std::move(arg));
  }
  return signature;
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
  lowered.arguments = ForwardSignature(module);
  TORCH_INTERNAL_ASSERT(lowered.arguments.size() == lowered.num_inputs);
  lowered.attributes = LiftAttributes(lowered.graph, module._ivalue());
  torch::jit::ConstantPropagation(lowered.graph);
  torch::jit::EliminateDeadCode(lowered.graph);
  // Lists and dicts filled in straight-line code (DenseNet's features, a
  // segmentation backbone's outputs) would otherwise tie every unit between
  // their uses into one: only tensors and plain values cross stages.
  ScalarizeContainers(lowered.graph);
  // Each random op draws from a generator keyed by its place in the whole
  // model, so draws do not depend on the split, schedule or threads.
  KeyRandomOps(lowered.graph);
  // `return a, b` or `return {"logits": x}`: each tensor leaf becomes an
  // output, so that each can live on (and be gathered from) the stage that makes it.
  lowered.output_structure = FlattenReturn(*lowered.graph);
  torch::jit::EliminateDeadCode(lowered.graph);
  return lowered;
}

}  // namespace gpipe
