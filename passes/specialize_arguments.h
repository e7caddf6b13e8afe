#pragma once

#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// Which of `candidates` (indices into graph.inputs(): arguments the caller
// leaves at their defaults) a top-level prim::If depends on whose blocks do
// heavy work (a matrix product or a convolution). Such a branch is one
// indivisible unit to the partitioner, however many layers it wraps.
std::vector<size_t> FindBranchArguments(const torch::jit::Graph& graph,
                                        const std::vector<size_t>& candidates);

// Replaces every use of each graph input by a constant of its value, then
// folds constants, so that branches on them disappear. The inputs stay
// (unused): the forward signature does not change.
//
// before (timm's VisionTransformer.forward, attn_mask and is_causal given no value):
//   graph(%x : Tensor, %attn_mask : Tensor?, %is_causal : bool):
//     %has_mask : bool = aten::__isnot__(%attn_mask, %none)
//     %branch : bool = prim::If(%has_mask)
//       block0(): -> (%true)
//       block1(): -> (%is_causal)
//     %y : Tensor = prim::If(%branch)
//       block0(): <every block, with the mask>  -> (%y0)
//       block1(): <every block, without it>     -> (%y1)
// after SpecializeArguments({{1, None}, {2, false}}):
//   graph(%x : Tensor, %attn_mask : Tensor?, %is_causal : bool):
//     <every block, without the mask>
void SpecializeArguments(std::shared_ptr<torch::jit::Graph>& graph,
                         const std::vector<std::pair<size_t, c10::IValue>>& values);

}  // namespace gpipe
