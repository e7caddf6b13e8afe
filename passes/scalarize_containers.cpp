// ScalarizeContainers: scalar replacement of lists and dicts.
//
// For each prim::ListConstruct / prim::DictConstruct (or empty aten::dict(),
// what OrderedDict() scripts to) in the top-level block,
// the uses are visited in program order while the contents are tracked:
//   list: aten::append(l, x)           contents += x           (node removed)
//         aten::_set_item(l, i, x)     contents[i] = x         (node removed)
//         aten::__getitem__(l, i)      -> contents[i]
//         aten::len(l)                 -> constant
//         prim::ListUnpack(l)          -> contents
//   dict: aten::_set_item(d, k, v)     contents[k] = v         (node removed)
//         aten::__getitem__(d, k)      -> contents[k]
//         aten::get(d, k[, default])   -> contents[k] or the default
//         aten::__contains__(d, k)     -> constant
//         aten::len(d)                 -> constant
//         aten::values(d)              -> a new list of the values (itself scalarized next round)
//   either: an op whose schema neither writes nor aliases the argument, the
//         graph's return, or a tuple/list/dict built from it (after which it
//         must not change)            -> a fresh construct of the contents, just before it.
// Indices and keys must be constants. The uses are first simulated; the
// rewrite happens only when every use is one of the above. Rounds repeat
// until nothing changes (a rewrite can expose new containers).

#include "passes/scalarize_containers.h"

#include <algorithm>
#include <functional>
#include <optional>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

namespace gpipe {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Use;
using torch::jit::Value;

const c10::Symbol kGet = c10::Symbol::fromQualString("aten::get");

std::optional<std::string> ConstantKey(Value* v) {
  auto ivalue = torch::jit::toIValue(v);
  if (!ivalue) return std::nullopt;
  if (ivalue->isString()) return "s:" + ivalue->toStringRef();
  if (ivalue->isInt()) return "i:" + std::to_string(ivalue->toInt());
  return std::nullopt;
}

std::optional<int64_t> ConstantIndex(Value* v, size_t size) {
  auto ivalue = torch::jit::toIValue(v);
  if (!ivalue || !ivalue->isInt()) return std::nullopt;
  int64_t i = ivalue->toInt();
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return std::nullopt;
  return i;
}

// A tuple, list or dict built with the container as an element: it holds
// the container itself, so the container must not change afterwards.
bool IsConstruct(const Node* user) {
  return user->kind() == c10::prim::TupleConstruct || user->kind() == c10::prim::ListConstruct ||
         user->kind() == c10::prim::DictConstruct;
}

// An op that only reads the argument at `offset`: its schema neither writes
// to it nor lets an output alias it.
bool ReadsOnly(Node* user, size_t offset) {
  const c10::FunctionSchema* schema = user->maybeSchema();
  if (schema == nullptr || offset >= schema->arguments().size()) return false;
  return schema->arguments()[offset].alias_info() == nullptr;
}

class ContainerScalarizer {
 public:
  explicit ContainerScalarizer(std::shared_ptr<Graph> graph) : graph_(std::move(graph)) {}

  bool Run() {
    bool changed = false;
    for (bool round = true; round;) {
      round = false;
      std::vector<Node*> containers;
      for (Node* n : graph_->nodes()) {
        bool empty_dict = n->kind() == c10::aten::dict && n->inputs().empty();  // OrderedDict()
        if (n->kind() == c10::prim::ListConstruct || n->kind() == c10::prim::DictConstruct ||
            empty_dict) {
          containers.push_back(n);
        }
      }
      for (Node* n : containers) round = Scalarize(n) || round;
      changed = changed || round;
    }
    if (changed) torch::jit::EliminateDeadCode(graph_);
    return changed;
  }

 private:
  // The contents as tracked: (key, value) in insertion order; lists use
  // their position as the key.
  struct Contents {
    bool is_dict = false;
    std::vector<std::string> keys;
    std::vector<Value*> key_values;  // dicts: the Value of each key
    std::vector<Value*> values;
    std::optional<size_t> Find(const std::string& key) const {
      auto it = std::find(keys.begin(), keys.end(), key);
      if (it == keys.end()) return std::nullopt;
      return static_cast<size_t>(it - keys.begin());
    }
  };

  bool Scalarize(Node* construct) {
    Value* container = construct->output();
    std::vector<Use> uses = container->uses();
    for (const Use& use : uses) {
      if (use.user->owningBlock() != graph_->block()) return false;  // inside a loop or branch
    }
    std::stable_sort(uses.begin(), uses.end(), [&](const Use& a, const Use& b) {
      if (a.user == graph_->return_node()) return false;
      if (b.user == graph_->return_node()) return true;
      return a.user->isBefore(b.user);
    });
    Contents contents;
    contents.is_dict = construct->kind() != c10::prim::ListConstruct;
    const auto& in = construct->inputs();
    for (size_t k = 0; k < in.size(); k += contents.is_dict ? 2 : 1) {
      if (contents.is_dict) {
        auto key = ConstantKey(in[k]);
        if (!key) return false;
        contents.keys.push_back(*key);
        contents.key_values.push_back(in[k]);
        contents.values.push_back(in[k + 1]);
      } else {
        contents.keys.push_back(std::to_string(k));
        contents.values.push_back(in[k]);
      }
    }
    // Simulate, recording each rewrite; apply them only if every use is understood.
    std::vector<std::function<void()>> rewrites;
    bool gains = false;     // only whole reads: the container is as good as its elements already
    bool captured = false;  // held by another container from here on: no more changes to it
    for (const Use& use : uses) {
      bool whole_read = use.user == graph_->return_node() || ReadsOnly(use.user, use.offset) ||
                        IsConstruct(use.user);
      const auto kind = use.user->kind();
      if (captured && (kind == c10::aten::append || kind == c10::aten::_set_item)) return false;
      captured = captured || IsConstruct(use.user);
      auto rewrite = Plan(use, container, contents);
      if (!rewrite) return false;
      gains = gains || !whole_read;
      rewrites.push_back(std::move(*rewrite));
    }
    if (!gains) return false;
    GRAPH_UPDATE("scalarizing ", container->debugName(), " (", uses.size(), " uses)");
    for (auto& r : rewrites) r();
    return true;
  }

  // What to do with one use given the contents before it; updates them.
  std::optional<std::function<void()>> Plan(const Use& use, Value* container, Contents& contents) {
    Node* user = use.user;
    const auto kind = user->kind();
    const bool is_dict = contents.is_dict;
    auto unused_output = [&] { return user->outputs().empty() || !user->output()->hasUses(); };
    if (use.offset == 0 && kind == c10::aten::append && !is_dict && unused_output()) {
      contents.keys.push_back(std::to_string(contents.values.size()));
      contents.values.push_back(user->input(1));
      return [user] { user->destroy(); };
    }
    if (use.offset == 0 && kind == c10::aten::_set_item && unused_output()) {
      std::optional<size_t> slot;
      if (is_dict) {
        auto key = ConstantKey(user->input(1));
        if (!key) return std::nullopt;
        slot = contents.Find(*key);
        if (!slot) {
          contents.keys.push_back(*key);
          contents.key_values.push_back(user->input(1));
          contents.values.push_back(user->input(2));
          return [user] { user->destroy(); };
        }
      } else {
        auto index = ConstantIndex(user->input(1), contents.values.size());
        if (!index) return std::nullopt;
        slot = static_cast<size_t>(*index);
      }
      contents.values[*slot] = user->input(2);
      return [user] { user->destroy(); };
    }
    if (use.offset == 0 && (kind == c10::aten::__getitem__ || kind == kGet)) {
      std::optional<size_t> slot;
      if (is_dict) {
        auto key = ConstantKey(user->input(1));
        if (!key) return std::nullopt;
        slot = contents.Find(*key);
      } else if (kind == c10::aten::__getitem__) {
        auto index = ConstantIndex(user->input(1), contents.values.size());
        if (index) slot = static_cast<size_t>(*index);
      }
      Value* result = nullptr;
      if (slot) {
        result = contents.values[*slot];
      } else if (is_dict && kind == kGet && user->inputs().size() == 3) {
        result = user->input(2);
      } else {
        return std::nullopt;  // raises at run time: leave it to do so
      }
      return [user, result] { ReplaceWith(user, result); };
    }
    if (use.offset == 0 && (kind == c10::aten::len || kind == c10::aten::__contains__)) {
      c10::IValue answer;
      if (kind == c10::aten::len) {
        answer = static_cast<int64_t>(contents.values.size());
      } else {
        auto key = is_dict ? ConstantKey(user->input(1)) : std::nullopt;
        if (!key) return std::nullopt;
        answer = contents.Find(*key).has_value();
      }
      return [this, user, answer] {
        torch::jit::WithInsertPoint here(user);
        ReplaceWith(user, graph_->insertConstant(answer));
      };
    }
    if (use.offset == 0 && kind == c10::prim::ListUnpack && !is_dict) {
      if (user->outputs().size() != contents.values.size()) return std::nullopt;
      std::vector<Value*> values = contents.values;
      return [user, values] {
        for (size_t k = 0; k < values.size(); ++k)
          user->outputs()[k]->replaceAllUsesWith(values[k]);
        user->destroy();
      };
    }
    if (kind == c10::aten::values && is_dict) {
      auto element = container->type()->expectRef<c10::DictType>().getValueType();
      std::vector<Value*> values = contents.values;
      return [this, user, element, values] {
        torch::jit::WithInsertPoint here(user);
        Node* list = graph_->insertNode(graph_->createList(element, values));
        ReplaceWith(user, list->output());
      };
    }
    if (user == graph_->return_node() || ReadsOnly(user, use.offset) || IsConstruct(user)) {
      Contents snapshot = contents;
      c10::TypePtr type = container->type();
      size_t offset = use.offset;
      return [this, user, offset, snapshot, type] {
        torch::jit::WithInsertPoint here(user);
        Node* fresh = nullptr;
        if (snapshot.is_dict) {
          const auto& dict = type->expectRef<c10::DictType>();
          fresh = graph_->createDict(dict.getKeyType(), dict.getValueType(), snapshot.key_values,
                                     snapshot.values);
        } else {
          fresh = graph_->createList(type->expectRef<c10::ListType>().getElementType(),
                                     snapshot.values);
        }
        graph_->insertNode(fresh);
        fresh->output()->setType(type);
        user->replaceInput(offset, fresh->output());
      };
    }
    return std::nullopt;
  }

  static void ReplaceWith(Node* user, Value* value) {
    user->output()->replaceAllUsesWith(value);
    user->destroy();
  }

  std::shared_ptr<Graph> graph_;
};

}  // namespace

bool ScalarizeContainers(const std::shared_ptr<torch::jit::Graph>& graph) {
  return ContainerScalarizer(graph).Run();
}

}  // namespace gpipe
