#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// Replaces a list or dict built in the graph's top level whose contents are
// known wherever it is used (appends and stores with constant indices or
// keys, all in straight-line code) by its elements: a read of one element
// becomes that element, a store or append disappears, and an operation that
// reads the whole container (torch.cat, a return) gets a fresh one built
// right before it from the elements at that point. The container then no
// longer lives across the code between its uses, so stage boundaries may
// fall there: DenseNet's `features` list, which every dense layer appends
// to and reads, and the dicts that torchvision's segmentation backbones
// fill and their heads read. A container used in any other way (inside a
// loop or branch, by an op that mutates or aliases it, stored in another
// container) is left alone. Returns true if the graph changed.
//
//   %l = prim::ListConstruct(%x)               %y = a::layer(%x)
//   %y = a::layer(%l)                  ==>     %l2 = prim::ListConstruct(%x, %y)
//   %n = aten::append(%l, %y)                  %z = aten::cat(%l2, %one)
//   %z = aten::cat(%l, %one)
//   (a::layer reading the whole list gets prim::ListConstruct(%x) too)
bool ScalarizeContainers(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace gpipe
