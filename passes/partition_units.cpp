// FindPartitionUnits: group top-level nodes by the top-level submodule they
// were inlined from.
//
// Inlining a prim::CallMethod on `prim::GetAttr[name="3"](%self)` records a
// call-stack entry with module instance "3" on every node it copies in, so
// the first entry of a node's call stack names the child of the root module
// it belongs to. For a scripted nn.Sequential
//   %a = aten::linear(%x, ...)   # callstack 0
//   %b = aten::relu(%a)          # callstack 1
//   %c = aten::linear(%b, ...)   # callstack 2
// gives the units "0" = [0,1), "1" = [1,2), "2" = [2,3).

#include "passes/partition_units.h"

#include <map>

namespace gpipe {
namespace {

std::vector<std::string> ModulePathParts(const torch::jit::Node* node) {
  std::vector<std::string> parts;
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

// The first `depth` levels of the node's module path ("layer1.0" at depth 2).
std::string ModulePrefixOf(const torch::jit::Node* node, size_t depth) {
  std::string prefix;
  auto parts = ModulePathParts(node);
  for (size_t k = 0; k < parts.size() && k < depth; ++k) prefix += (k ? "." : "") + parts[k];
  return prefix;
}

}  // namespace

std::string ModulePathOf(const torch::jit::Node* node) {
  std::string path;
  for (const auto& part : ModulePathParts(node)) path += (path.empty() ? "" : ".") + part;
  return path;
}

bool OutputsUnused(const torch::jit::Node* node) {
  for (const torch::jit::Value* out : node->outputs()) {
    if (out->hasUses()) return false;
  }
  return true;
}

std::vector<PartitionUnit> FindPartitionUnits(const std::shared_ptr<torch::jit::Graph>& graph,
                                              size_t depth) {
  TORCH_CHECK(depth >= 1, "--unit-depth must be at least 1");
  std::vector<PartitionUnit> units;
  size_t pending = SIZE_MAX;  // first root node waiting for the unit it feeds
  size_t index = 0;
  for (const torch::jit::Node* node : graph->nodes()) {
    size_t i = index++;
    if (node->kind() == c10::prim::Constant) continue;
    std::string owner = ModulePrefixOf(node, depth);
    if (owner.empty()) {
      // Root-module nodes feed what follows (torch.cat of a skip, flatten
      // before fc); a node whose outputs nobody uses (a check that raises)
      // belongs to what came before.
      if (OutputsUnused(node) && pending == SIZE_MAX && !units.empty()) {
        units.back().end = i + 1;
      } else if (pending == SIZE_MAX) {
        pending = i;
      }
      continue;
    }
    if (pending == SIZE_MAX && !units.empty() && units.back().name == owner) {
      units.back().end = i + 1;
      continue;
    }
    units.push_back({owner, pending == SIZE_MAX ? i : pending, i + 1});
    pending = SIZE_MAX;
  }
  if (pending != SIZE_MAX) {  // trailing root nodes
    if (units.empty()) units.push_back({"", pending, index});
  }
  // Skipped constants: units tile [0, node count).
  for (size_t u = 0; u < units.size(); ++u) units[u].begin = u == 0 ? 0 : units[u - 1].end;
  if (!units.empty()) units.back().end = index;

  std::map<std::string, int> calls;
  for (auto& unit : units) {
    int n = ++calls[unit.name];
    if (n > 1) unit.name += "#" + std::to_string(n);
  }
  return units;
}

}  // namespace gpipe
