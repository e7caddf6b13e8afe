#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// A run of consecutive top-level nodes that came from one call of one
// top-level submodule (for an nn.Sequential: one child). Units are what
// `--balance` counts and what stage boundaries fall between.
struct PartitionUnit {
  std::string name;  // submodule name as in the model ("0", "layer1"); "#2" marks a second call
  size_t begin = 0;  // index of the first top-level node of the unit
  size_t end = 0;    // one past the last
};

// Finds the partition units of an inlined graph from the call stacks that
// torch::jit::Inline records. Constants are ignored (every stage clones the
// constants it uses). A node of the root module's own forward joins the unit
// it feeds, the next one (torch.cat of a skip joins the decoder block); one
// whose outputs are unused (a check that raises) joins the unit before it;
// trailing root nodes join the last unit. Pure analysis: the graph is unchanged.
//
// `depth` selects the level of the module hierarchy: 1 = children of the root
// ("layer1"), 2 = their children ("layer1.0"), and so on; a node whose module
// path is shorter belongs to its full path's unit.
std::vector<PartitionUnit> FindPartitionUnits(const std::shared_ptr<torch::jit::Graph>& graph,
                                              size_t depth = 1);

// The submodule path of a node: "layer1.0.conv1" for a node inlined from
// self.layer1[0].conv1.forward, "" for the root module's own nodes.
std::string ModulePathOf(const torch::jit::Node* node);

}  // namespace gpipe
