#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "passes/cut_points.h"

namespace gpipe {

// A submodule as a path of call levels from the root: {"features",
// "denseblock1"}; {"layers.0"} for a ModuleList element (see
// InlineModuleCalls: an indexed container is not a level of its own).
using ModulePath = std::vector<std::string>;

std::string JoinModulePath(const ModulePath& path);  // "features.denseblock1"

// A run of consecutive top-level nodes that stage boundaries may fall
// around: the nodes of one submodule call (or of several, merged where no
// boundary may fall between them). Units are what `--balance` counts.
struct PartitionUnit {
  std::string name;     // module path ("layer1.0"); "#2" marks a second call; "a..b" a merged run
  size_t begin = 0;     // index of the first top-level node of the unit
  size_t end = 0;       // one past the last
  ModulePath module;    // the submodule the unit is (for a merged run: their common ancestor)
  double weight = 0;    // static estimate of its work (see OpWeight)
  bool merged = false;  // several submodule calls that no boundary may separate
};

// Static estimate of a node's work, blocks included: 10 for a matrix
// product or convolution, 1 for any other ATen op, 0 for bookkeeping (prim
// ops, constants). Only relative sizes matter: it picks granularity and the
// default cuts of `--stages N` when nothing is measured.
double OpWeight(const torch::jit::Node* node);

// The module structure of an inlined graph, from the call stacks that
// InlineModuleCalls (or torch::jit::Inline) records, and the units for any
// choice of granularity. Pure analysis: the graph is unchanged.
//
// A *frontier* is a set of submodules, none inside another, chosen as units.
// Each top-level node belongs to the frontier module whose path starts its
// own. A node outside every frontier module is *glue*: code in the forward
// of the root or of a module whose children were chosen (a torch.cat in a
// block's own forward). Glue never forms a unit: it joins the next unit when
// that unit lies inside the glue's module and the glue feeds it, else the
// unit before it inside that module (a block's trailing torch.cat), else its
// neighbour. Constants belong to no unit (every stage clones the ones it
// uses); units tile [0, node count). Where a value that cannot cross stages
// (FindCutBlockers) lies between two units, they are merged into one.
class ModuleTree {
 public:
  explicit ModuleTree(const std::shared_ptr<torch::jit::Graph>& graph);

  std::vector<PartitionUnit> Units(const std::vector<ModulePath>& frontier) const;

  // The modules at call level `depth` (1 = the root's children); a branch
  // that ends sooner contributes its deepest module.
  std::vector<ModulePath> Frontier(size_t depth) const;

  // The submodules one level below `parent` that run operations, in order.
  std::vector<ModulePath> Children(const ModulePath& parent) const;

  // Why no boundary may go before top-level node `index` (nullopt: it may).
  const std::optional<CutBlocker>& BlockerAt(size_t index) const { return blockers_.at(index); }
  size_t size() const { return paths_.size(); }

 private:
  std::vector<ModulePath> paths_;  // per top-level node
  std::vector<bool> is_constant_;
  std::vector<bool> outputs_unused_;
  std::vector<double> weights_;
  std::vector<std::optional<CutBlocker>> blockers_;
};

// Units at one call level (`--unit-depth`): ModuleTree(graph).Units(Frontier(depth)).
std::vector<PartitionUnit> FindPartitionUnits(const std::shared_ptr<torch::jit::Graph>& graph,
                                              size_t depth = 1);

// The submodule path of a node: "layer1.0.conv1" for a node inlined from
// self.layer1[0].conv1.forward, "" for the root module's own nodes.
std::string ModulePathOf(const torch::jit::Node* node);

}  // namespace gpipe
