// ModuleTree: the units that stage boundaries fall between.
//
// Inlining a prim::CallMethod records a call-stack entry naming the module
// instance on every node it copies in, so a node's call stack spells the
// submodule it came from: {"layer1", "0", "conv1"}. A frontier picks units
// from that tree; for a scripted nn.Sequential at depth 1
//   %a = aten::linear(%x, ...)   # callstack 0
//   %b = aten::relu(%a)          # callstack 1
//   %c = aten::linear(%b, ...)   # callstack 2
// gives the units "0" = [0,1), "1" = [1,2), "2" = [2,3). With the frontier
// {"features.denseblock1"} refined to its dense layers, the block's own
// `features = [x]`, `features.append(y)` and `torch.cat(features, 1)` are
// glue joining the layers around them, and because the list `features`
// crosses every boundary between the layers (FindCutBlockers), the layers
// merge back into one unit named "features.denseblock1".

#include "passes/partition_units.h"

#include <map>
#include <set>
#include <unordered_set>

namespace gpipe {
namespace {

ModulePath ModulePathParts(const torch::jit::Node* node) {
  ModulePath parts;
  auto callstack = node->callstack();
  if (!callstack) return parts;
  for (const auto& entry : (*callstack)->vec()) {
    const auto& info = std::get<torch::jit::kModuleInstanceInfo>(entry);
    // "SELF" marks a call to another method of the same module
    // (ResNet.forward -> self._forward_impl): not a level of the hierarchy.
    if (info && info->instance_name() != "SELF") parts.push_back(info->instance_name());
  }
  return parts;
}

bool StartsWith(const ModulePath& path, const ModulePath& prefix) {
  return prefix.size() <= path.size() && std::equal(prefix.begin(), prefix.end(), path.begin());
}

ModulePath Truncated(const ModulePath& path, size_t depth) {
  return ModulePath(path.begin(),
                    path.begin() + static_cast<std::ptrdiff_t>(std::min(depth, path.size())));
}

ModulePath CommonPrefix(const ModulePath& a, const ModulePath& b) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return Truncated(a, k);
}

bool HasTensorOutput(const torch::jit::Node* node) {
  for (const torch::jit::Value* out : node->outputs()) {
    if (out->type()->kind() == c10::TypeKind::TensorType) return true;
  }
  return false;
}

}  // namespace

std::string JoinModulePath(const ModulePath& path) {
  std::string joined;
  for (const auto& part : path) joined += (joined.empty() ? "" : ".") + part;
  return joined;
}

std::string ModulePathOf(const torch::jit::Node* node) {
  return JoinModulePath(ModulePathParts(node));
}

double OpWeight(const torch::jit::Node* node) {
  static const std::unordered_set<std::string> kHeavy = {"linear",
                                                         "matmul",
                                                         "mm",
                                                         "bmm",
                                                         "addmm",
                                                         "baddbmm",
                                                         "einsum",
                                                         "conv1d",
                                                         "conv2d",
                                                         "conv3d",
                                                         "convolution",
                                                         "_convolution",
                                                         "conv_transpose1d",
                                                         "conv_transpose2d",
                                                         "conv_transpose3d",
                                                         "scaled_dot_product_attention",
                                                         "_native_multi_head_attention",
                                                         "lstm",
                                                         "gru",
                                                         "rnn_tanh",
                                                         "rnn_relu",
                                                         "bilinear"};
  double weight = 0;
  for (const torch::jit::Block* block : node->blocks()) {
    for (const torch::jit::Node* inner : block->nodes()) weight += OpWeight(inner);
  }
  // gpipe:: ops are ATen ops rewritten by KeyRandomOps (keyed dropout, attention).
  static const c10::Symbol kGpipe = c10::Symbol::fromQualString("namespaces::gpipe");
  const bool tensor_op = node->kind().is_aten() || node->kind().ns() == kGpipe;
  if (!tensor_op || !HasTensorOutput(node)) return weight;
  return weight + (kHeavy.count(node->kind().toUnqualString()) ? 10.0 : 1.0);
}

ModuleTree::ModuleTree(const std::shared_ptr<torch::jit::Graph>& graph)
    : blockers_(FindCutBlockers(graph)) {
  for (const torch::jit::Node* node : graph->nodes()) {
    paths_.push_back(ModulePathParts(node));
    is_constant_.push_back(node->kind() == c10::prim::Constant);
    bool unused = true;
    for (const torch::jit::Value* out : node->outputs()) unused = unused && !out->hasUses();
    outputs_unused_.push_back(unused);
    weights_.push_back(OpWeight(node));
  }
}

std::vector<ModulePath> ModuleTree::Frontier(size_t depth) const {
  TORCH_CHECK(depth >= 1, "--unit-depth must be at least 1");
  std::vector<ModulePath> seen;
  std::set<ModulePath> known;
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (is_constant_[i]) continue;
    ModulePath p = Truncated(paths_[i], depth);
    if (known.insert(p).second) seen.push_back(p);
  }
  std::vector<ModulePath> frontier;
  for (const auto& p : seen) {
    bool refined = false;  // some deeper module was chosen inside p: p's own nodes are glue
    for (const auto& q : seen) refined = refined || (q.size() > p.size() && StartsWith(q, p));
    if (!refined) frontier.push_back(p);
  }
  if (frontier.empty()) frontier.push_back({});
  return frontier;
}

std::vector<ModulePath> ModuleTree::Children(const ModulePath& parent) const {
  std::vector<ModulePath> children;
  std::set<ModulePath> known;
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (is_constant_[i] || paths_[i].size() <= parent.size() || !StartsWith(paths_[i], parent))
      continue;
    ModulePath child = Truncated(paths_[i], parent.size() + 1);
    if (known.insert(child).second) children.push_back(child);
  }
  return children;
}

std::vector<PartitionUnit> ModuleTree::Units(const std::vector<ModulePath>& frontier) const {
  const std::set<ModulePath> chosen(frontier.begin(), frontier.end());
  const size_t n = paths_.size();
  // The frontier module owning each node; glue first gets none.
  std::vector<std::optional<ModulePath>> owner(n);
  std::vector<size_t> order;  // non-constant nodes
  for (size_t i = 0; i < n; ++i) {
    if (is_constant_[i]) continue;
    order.push_back(i);
    for (size_t k = 0; k <= paths_[i].size() && !owner[i]; ++k) {
      ModulePath prefix = Truncated(paths_[i], k);
      if (chosen.count(prefix)) owner[i] = prefix;
    }
  }
  // Each run of glue between owned nodes p and q: a prefix joins p, the rest q.
  for (size_t a = 0; a < order.size();) {
    if (owner[order[a]]) {
      ++a;
      continue;
    }
    size_t b = a;
    while (b < order.size() && !owner[order[b]]) ++b;
    const std::optional<ModulePath> prev = a > 0 ? owner[order[a - 1]] : std::nullopt;
    const std::optional<ModulePath> next = b < order.size() ? owner[order[b]] : std::nullopt;
    auto joins_previous = [&](size_t g) {
      if (!next) return true;
      if (!prev) return false;
      bool prev_inside = StartsWith(*prev, paths_[g]), next_inside = StartsWith(*next, paths_[g]);
      if (prev_inside != next_inside) return prev_inside;
      return static_cast<bool>(outputs_unused_[g]);  // unused (a check that raises) stays behind
    };
    size_t split = a;  // glue [a, split) joins prev
    for (size_t g = a; g < b; ++g) {
      if (joins_previous(order[g])) split = g + 1;
    }
    for (size_t g = a; g < b; ++g) owner[order[g]] = g < split ? prev : next;
    if (!prev && !next) {
      for (size_t g = a; g < b; ++g) owner[order[g]] = ModulePath{};
    }
    a = b;
  }
  // Runs of one owner, tiled over [0, n) (constants go with the unit after them).
  struct Run {
    ModulePath module;
    size_t begin, end;
    std::vector<std::string> members;
  };
  std::vector<Run> runs;
  for (size_t i : order) {
    if (!runs.empty() && runs.back().module == *owner[i]) {
      runs.back().end = i + 1;
      continue;
    }
    runs.push_back({*owner[i], i, i + 1, {JoinModulePath(*owner[i])}});
  }
  if (runs.empty()) runs.push_back({{}, 0, n, {""}});
  for (size_t u = 0; u < runs.size(); ++u) runs[u].begin = u == 0 ? 0 : runs[u - 1].end;
  runs.back().end = n;
  // No boundary where a value that cannot cross stages lies between two runs.
  std::vector<Run> merged;
  for (auto& run : runs) {
    if (merged.empty() || !blockers_[run.begin]) {
      merged.push_back(std::move(run));
      continue;
    }
    Run& into = merged.back();
    into.module = CommonPrefix(into.module, run.module);
    into.end = run.end;
    into.members.push_back(run.members.front());
  }
  std::vector<PartitionUnit> units;
  for (size_t u = 0; u < merged.size(); ++u) {
    const Run& run = merged[u];
    PartitionUnit unit{run.members.front(), run.begin, run.end,
                       run.module,          0,         run.members.size() > 1};
    for (size_t i = run.begin; i < run.end; ++i) unit.weight += weights_[i];
    if (unit.merged) {
      // Named after the common ancestor when the run is all of it.
      bool whole = !run.module.empty();
      for (size_t v = 0; v < merged.size() && whole; ++v)
        whole = v == u || !StartsWith(merged[v].module, run.module);
      unit.name =
          whole ? JoinModulePath(run.module) : run.members.front() + ".." + run.members.back();
    }
    units.push_back(std::move(unit));
  }
  std::map<std::string, int> calls;
  for (auto& unit : units) {
    int k = ++calls[unit.name];
    if (k > 1) unit.name += "#" + std::to_string(k);
  }
  return units;
}

std::vector<PartitionUnit> FindPartitionUnits(const std::shared_ptr<torch::jit::Graph>& graph,
                                              size_t depth) {
  ModuleTree tree(graph);
  return tree.Units(tree.Frontier(depth));
}

}  // namespace gpipe
