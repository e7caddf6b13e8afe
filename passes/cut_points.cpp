// FindCutBlockers: where a stage boundary may fall.
//
// A value defined by top-level node i and last used (directly, or inside
// the blocks of) top-level node j crosses every boundary in (i, j]. If its
// type cannot travel between stages, each of those boundaries is blocked by
// it. One pass over the nodes and their uses, then a sweep:
//
//   %x = a::conv(%in)               # boundary before 1: %x (Tensor)   ok
//   %l = prim::ListConstruct(%x)    # boundary before 2: %l (Tensor[]) blocked
//   %y = a::layer(%l)               # boundary before 3: %l            blocked
//   %n = aten::append(%l, %y)       # boundary before 4: %l            blocked
//   %z = aten::cat(%l, %c1)         # boundary before 5: %z (Tensor)   ok
//   %o = a::head(%z)

#include "passes/cut_points.h"

#include <unordered_map>

namespace gpipe {
namespace {

using torch::jit::Node;
using torch::jit::Value;

bool IsPlainValue(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::NumberType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::DeviceObjType:
      return true;
    case c10::TypeKind::OptionalType:
      return IsPlainValue(type->expectRef<c10::OptionalType>().getElementType());
    case c10::TypeKind::ListType: {
      auto element = type->expectRef<c10::ListType>().getElementType()->kind();
      return element == c10::TypeKind::IntType || element == c10::TypeKind::FloatType ||
             element == c10::TypeKind::BoolType;
    }
    case c10::TypeKind::TupleType:
      for (const auto& element : type->containedTypes()) {
        if (!IsPlainValue(element)) return false;
      }
      return true;
    default:
      return false;
  }
}

// The index of the top-level node that `node` is, or is nested in.
size_t TopLevelIndex(Node* node, const std::unordered_map<Node*, size_t>& index, size_t end) {
  while (node->owningBlock() != node->owningGraph()->block())
    node = node->owningBlock()->owningNode();
  auto it = index.find(node);
  return it == index.end() ? end : it->second;  // the return node: not a stage's use
}

}  // namespace

bool CanCrossStages(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (type->kind() == c10::TypeKind::OptionalType &&
      type->expectRef<c10::OptionalType>().getElementType()->kind() == c10::TypeKind::TensorType) {
    return true;
  }
  return IsPlainValue(type);
}

std::vector<std::optional<CutBlocker>> FindCutBlockers(
    const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  std::unordered_map<Node*, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  std::vector<std::optional<CutBlocker>> blockers(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (Value* v : nodes[i]->outputs()) {
      // Modules are read through by LiftAttributes before any split.
      auto object = v->type()->cast<c10::ClassType>();
      if (CanCrossStages(v->type()) || (object && object->is_module())) continue;
      size_t last = i;
      for (const auto& use : v->uses()) {
        size_t j = TopLevelIndex(use.user, index, i);
        if (j > last) last = j;
      }
      for (size_t b = i + 1; b <= last; ++b) {
        if (!blockers[b]) blockers[b] = CutBlocker{v->debugName(), v->type()->annotation_str()};
      }
    }
  }
  return blockers;
}

}  // namespace gpipe
