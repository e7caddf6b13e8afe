#pragma once

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// torch::jit::Inline, except for the module path each inlined call records.
// Inline records only the last attribute name of the module a method is
// called on, so `self.layers[0](x)` (a ModuleList, which is indexed but never
// called) is recorded as instance "0", and its nodes' module path loses
// "layers". This pass records the whole attribute chain from the calling
// method's `self` ("layers.0"), so that ModulePathOf gives the real
// submodule path ("layers.0.self_attn"). Calls are inlined bottom-up (each
// callee's own calls first), as Inline does. Returns true if the graph changed.
//
//   graph(%self : Enc, %x : Tensor):                graph(%self : Enc, %x : Tensor):
//     %layers = prim::GetAttr[name="layers"](%self)   ...
//     %l0 = prim::GetAttr[name="0"](%layers)   ==>    %y = aten::relu(%x)   # module path
//     "layers.0" %y = prim::CallMethod[name="forward"](%l0, %x)  return (%y) return (%y)
bool InlineModuleCalls(torch::jit::Graph& graph);

}  // namespace gpipe
