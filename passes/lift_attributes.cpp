// LiftAttributes: turn module state into explicit graph inputs.
//
// A scripted module's inlined forward graph reads its state through chains of
// prim::GetAttr from `self`. Stages need a graph whose state is explicit, so
// that each stage can own exactly the tensors it uses. The pass walks every
// node (blocks included), resolves each chain against the module object and
//   - tensors          -> one graph input per distinct tensor (deduplicated by
//                         TensorImpl, so tied weights stay one input);
//   - `training` bools -> one shared bool input (a stage re-binds it to its own
//                         `training` attribute, so train()/eval() still work);
//   - other attributes -> constants (ints, floats, strings, None, ...).
// `torch::jit::freeze` is not an option: it constant-folds the weights.
//
//   graph(%self : Net, %x : Tensor):
//     %l = prim::GetAttr[name="fc"](%self)
//     %w = prim::GetAttr[name="weight"](%l)
//     %y = aten::relu(%w)
//   becomes
//   graph(%x : Tensor, %fc.weight : Tensor):
//     %y = aten::relu(%fc.weight)

#include "passes/lift_attributes.h"

#include <cctype>
#include <unordered_map>

#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

namespace gpipe {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

std::string SanitizeName(const std::string& dotted) {
  std::string out;
  for (char c : dotted) {
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  }
  return out;
}

class AttributeLifter {
 public:
  AttributeLifter(std::shared_ptr<Graph> graph, c10::intrusive_ptr<c10::ivalue::Object> self)
      : graph_(std::move(graph)) {
    TORCH_CHECK(!graph_->inputs().empty() && graph_->inputs()[0]->type()->cast<c10::ClassType>(),
                "LiftAttributes expects a method graph whose first input is `self`");
    self_ = graph_->inputs()[0];
    objects_[self_] = {"", c10::IValue(std::move(self))};
  }

  std::vector<LiftedAttribute> Run() {
    LiftBlock(graph_->block());
    CheckNoModuleUses(graph_->block());
    torch::jit::EliminateDeadCode(graph_);
    TORCH_INTERNAL_ASSERT(!self_->hasUses());
    graph_->eraseInput(0);
    return std::move(lifted_);
  }

 private:
  struct Resolved {
    std::string path;
    c10::IValue value;
  };

  void LiftBlock(Block* block) {
    for (Node* node : block->nodes()) {
      for (Block* sub : node->blocks()) LiftBlock(sub);
      if (node->kind() == c10::prim::GetAttr) LiftGetAttr(node);
      if (node->kind() == c10::prim::SetAttr && objects_.count(node->input(0))) {
        TORCH_CHECK(false, "the model assigns module attribute '", node->s(c10::attr::name),
                    "' in forward (prim::SetAttr); pipelined stages cannot rebind attributes. "
                    "Keep the state in a tensor buffer and update it in place instead");
      }
    }
  }

  void LiftGetAttr(Node* node) {
    auto parent = objects_.find(node->input(0));
    if (parent == objects_.end()) return;  // a GetAttr on something that is not our module
    const std::string& field = node->s(c10::attr::name);
    std::string path = parent->second.path.empty() ? field : parent->second.path + "." + field;
    c10::IValue value = parent->second.value.toObject()->getAttr(field);
    Value* out = node->output();

    if (value.isObject()) {  // a submodule (or other object): resolved by later GetAttrs
      objects_[out] = {path, value};
      return;
    }
    Value* replacement = nullptr;
    if (value.isTensor()) {
      replacement = TensorInput(path, value.toTensor(), node->input(0), field);
    } else if (field == "training" && value.isBool()) {
      replacement = TrainingFlagInput(value);
    } else {
      torch::jit::WithInsertPoint guard(node);
      auto constant = graph_->insertConstant(value);  // throws for unsupported kinds
      replacement = constant;
    }
    GRAPH_UPDATE("lifted ", path, " to %", replacement->debugName());
    out->replaceAllUsesWith(replacement);
  }

  Value* TensorInput(const std::string& path, const at::Tensor& tensor, Value* owner,
                     const std::string& field) {
    auto seen = tensor_inputs_.find(tensor.unsafeGetTensorImpl());
    if (seen != tensor_inputs_.end()) return seen->second;
    auto owner_type = owner->type()->expect<c10::ClassType>();
    auto slot = owner_type->findAttributeSlot(field);
    bool is_parameter = slot && owner_type->is_parameter(*slot);
    Value* input = graph_->addInput(SanitizeName(path))->setType(c10::TensorType::get());
    lifted_.push_back({path, is_parameter ? LiftedAttribute::Kind::Parameter : LiftedAttribute::Kind::Buffer,
                       c10::IValue(tensor)});
    tensor_inputs_[tensor.unsafeGetTensorImpl()] = input;
    return input;
  }

  Value* TrainingFlagInput(const c10::IValue& value) {
    if (training_input_ == nullptr) {
      training_input_ = graph_->addInput("training")->setType(c10::BoolType::get());
      lifted_.push_back({"training", LiftedAttribute::Kind::TrainingFlag, value});
    } else {
      TORCH_CHECK(lifted_flag().value.toBool() == value.toBool(),
                  "the model's submodules disagree on `training` (some are in train mode, some "
                  "in eval mode); call model.train() or model.eval() before exporting");
    }
    return training_input_;
  }

  const LiftedAttribute& lifted_flag() const {
    for (const auto& a : lifted_) {
      if (a.kind == LiftedAttribute::Kind::TrainingFlag) return a;
    }
    TORCH_INTERNAL_ASSERT(false);
  }

  void CheckNoModuleUses(Block* block) {
    for (Node* node : block->nodes()) {
      for (Block* sub : node->blocks()) CheckNoModuleUses(sub);
      if (node->kind() == c10::prim::GetAttr) continue;  // lifted, now dead
      for (Value* input : node->inputs()) {
        auto it = objects_.find(input);
        if (it == objects_.end()) continue;
        TORCH_CHECK(false, "module '", it->second.path.empty() ? "self" : it->second.path,
                    "' is used by ", node->kind().toQualString(),
                    " after inlining; only attribute reads (prim::GetAttr) of modules can be "
                    "split into stages. Rewrite that code to use tensors or plain values");
      }
    }
  }

  std::shared_ptr<Graph> graph_;
  Value* self_ = nullptr;
  Value* training_input_ = nullptr;
  std::unordered_map<Value*, Resolved> objects_;
  std::unordered_map<c10::TensorImpl*, Value*> tensor_inputs_;
  std::vector<LiftedAttribute> lifted_;
};

}  // namespace

std::vector<LiftedAttribute> LiftAttributes(std::shared_ptr<torch::jit::Graph>& graph,
                                            const c10::intrusive_ptr<c10::ivalue::Object>& self) {
  return AttributeLifter(graph, self).Run();
}

}  // namespace gpipe
