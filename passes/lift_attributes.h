#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// One module attribute that LiftAttributes turned into a graph input.
struct LiftedAttribute {
  enum class Kind {
    Parameter,     // a trainable tensor (nn.Parameter)
    Buffer,        // any other tensor attribute (running_mean, masks, ...)
    TrainingFlag,  // every `self.training` read, shared by all submodules
  };
  std::string name;  // dotted path from the root module, e.g. "3.weight"
  Kind kind;
  c10::IValue value;  // the tensor itself (same TensorImpl as the module's), or the flag
};

// Replaces every `prim::GetAttr` chain rooted at the graph's `self` input by a
// graph input (tensors and the training flag) or a constant (other attributes),
// then removes `self`. The new inputs are appended after the existing ones in
// the order of the returned vector. Expects an inlined graph (no
// prim::CallMethod left); any other use of a module value is a user error.
std::vector<LiftedAttribute> LiftAttributes(std::shared_ptr<torch::jit::Graph>& graph,
                                            const c10::intrusive_ptr<c10::ivalue::Object>& self);

}  // namespace gpipe
