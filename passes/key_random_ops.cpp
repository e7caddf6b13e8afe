// KeyRandomOps: every random op draws from a generator keyed by its identity.
//
// A pipeline runs a stage's forward for many micro-batches on many threads
// and processes, and again when it recomputes. With LibTorch's one shared
// generator the draws would depend on who draws first; with a generator per
// (run seed, step, micro-batch, op) they depend on nothing else
// (runtime/keyed_random.h). This pass gives each random op its identity: its
// number in graph order over the lowered model, before any split.
//
//   %y = aten::dropout(%x, %p, %train)
//   %z = aten::bernoulli(%y, %none)
//   %r = aten::rand_like(%x, %none, %none, %none, %none, %none)
// becomes
//   %g0 = gpipe::keyed_generator(0)
//   %y = gpipe::dropout(%x, %p, %train, False, False, %g0)
//   %g1 = gpipe::keyed_generator(1)
//   %z = aten::bernoulli(%y, %g1)
//   %g2 = gpipe::keyed_generator(2)
//   %e = aten::empty_like(%x, %none, %none, %none, %none, %none)
//   %r = aten::uniform_(%e, 0., 1., %g2)
//
// Attention draws its dropout mask inside ATen's op, which takes no generator:
//   %a = aten::scaled_dot_product_attention(%q, %k, %v, %mask, %p, %causal, %scale, %gqa)
// becomes
//   %g3 = gpipe::keyed_generator(3)
//   %a = gpipe::scaled_dot_product_attention(%q, %k, %v, %mask, %p, %causal, %scale, %gqa, %g3)
// (ATen's op itself when %p is 0 at run time, so eval and dropout-free
// models compute exactly what they did). Every such call is keyed, even one
// whose %p is a constant 0: the runtime then has one rule, "ATen's attention
// is random", to refuse stages compiled before the rewrite.
//
// Outside a runtime draw scope keyed_generator returns None, so the
// rewritten graph draws from the default generator as the original did.
// New nodes copy the replaced node's metadata (its call stack), so they stay
// in the same module and unit.

#include "passes/key_random_ops.h"

#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/jit/jit_log.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace gpipe {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool IsNoneValue(const Value* v) {
  return v->type()->kind() == c10::TypeKind::NoneType ||
         (v->node()->kind() == c10::prim::Constant && v->type()->kind() == c10::TypeKind::NoneType);
}

struct DropoutKind {
  bool feature;
  bool alpha;
  bool in_place;
};

std::optional<DropoutKind> DropoutOf(const Node* node) {
  const std::string name = node->kind().toQualString();
  static const std::vector<std::pair<std::string, DropoutKind>> kKinds = {
      {"aten::dropout", {false, false, false}},
      {"aten::dropout_", {false, false, true}},
      {"aten::feature_dropout", {true, false, false}},
      {"aten::feature_dropout_", {true, false, true}},
      {"aten::alpha_dropout", {false, true, false}},
      {"aten::alpha_dropout_", {false, true, true}},
      {"aten::feature_alpha_dropout", {true, true, false}},
      {"aten::feature_alpha_dropout_", {true, true, true}},
  };
  for (const auto& [kind_name, kind] : kKinds) {
    if (name == kind_name && node->inputs().size() == 3) return kind;
  }
  return std::nullopt;
}

// The position of the argument named "generator" in `node`'s schema.
std::optional<size_t> GeneratorArgument(const Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (schema == nullptr) return std::nullopt;
  for (size_t k = 0; k < schema->arguments().size() && k < node->inputs().size(); ++k) {
    if (schema->arguments()[k].name() == "generator") return k;
  }
  return std::nullopt;
}

// The overload of `node`'s op that takes the same arguments plus a generator
// (aten::rand(size, ...) -> aten::rand.generator(size, generator, ...)).
const c10::FunctionSchema* GeneratorOverload(const Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (schema == nullptr) return nullptr;
  for (const auto& op : torch::jit::getAllOperatorsFor(node->kind())) {
    const c10::FunctionSchema& candidate = op->schema();
    if (candidate.arguments().size() != schema->arguments().size() + 1) continue;
    size_t k = 0;
    bool match = true;
    for (const c10::Argument& arg : candidate.arguments()) {
      if (arg.name() == "generator") continue;
      if (k >= schema->arguments().size() || schema->arguments()[k].name() != arg.name()) {
        match = false;
        break;
      }
      ++k;
    }
    if (match && k == schema->arguments().size()) return &candidate;
  }
  return nullptr;
}

class RandomOpKeyer {
 public:
  explicit RandomOpKeyer(std::shared_ptr<Graph> graph) : graph_(std::move(graph)) {}

  bool Run() {
    KeyBlock(graph_->block());
    return changed_;
  }

 private:
  Value* NextGenerator(Node* before) {
    torch::jit::WithInsertPoint guard(before);
    Value* op = graph_->insertConstant(static_cast<int64_t>(next_op_++));
    Node* g = graph_->create(c10::Symbol::fromQualString("gpipe::keyed_generator"), {op}, 1);
    g->output()->setType(c10::OptionalType::create(c10::GeneratorType::get()));
    g->copyMetadata(before);
    g->insertBefore(before);
    changed_ = true;
    return g->output();
  }

  // Replaces `node` by `replacement` (inserted before it) and destroys it.
  void Replace(Node* node, Node* replacement) {
    replacement->copyMetadata(node);
    replacement->insertBefore(node);
    replacement->output()->copyMetadata(node->output());  // its type and name
    GRAPH_UPDATE("keyed ", *node, " as ", *replacement);
    node->output()->replaceAllUsesWith(replacement->output());
    node->destroy();
  }

  void KeyDropout(Node* node, const DropoutKind& kind) {
    Value* generator = NextGenerator(node);
    torch::jit::WithInsertPoint guard(node);
    Value* feature = graph_->insertConstant(kind.feature);
    Value* alpha = graph_->insertConstant(kind.alpha);
    Node* keyed = graph_->create(c10::Symbol::fromQualString("gpipe::dropout"),
                                 {node->input(0), node->input(1), node->input(2), feature, alpha,
                                  generator},
                                 1);
    if (!kind.in_place) return Replace(node, keyed);
    // x.dropout_(): the keyed result written back into x.
    keyed->copyMetadata(node);
    keyed->insertBefore(node);
    keyed->output()->setType(node->input(0)->type());
    Value* non_blocking = graph_->insertConstant(false);
    Node* copy = graph_->create(c10::aten::copy_, {node->input(0), keyed->output(), non_blocking}, 1);
    Replace(node, copy);
  }

  // scaled_dot_product_attention(q, k, v, mask, p, causal[, scale[, enable_gqa]]): torch 2.0
  // has no scale, 2.1-2.4 no enable_gqa; the keyed op takes all eight.
  bool KeyAttention(Node* node) {
    const size_t n = node->inputs().size();
    if (node->kind().toQualString() != std::string("aten::scaled_dot_product_attention") || n < 6 ||
        n > 8) {
      return false;
    }
    Value* generator = NextGenerator(node);
    torch::jit::WithInsertPoint guard(node);
    std::vector<Value*> inputs(node->inputs().begin(), node->inputs().end());
    if (n < 7) inputs.push_back(graph_->insertConstant(c10::IValue()));  // scale: None
    if (n < 8) inputs.push_back(graph_->insertConstant(false));          // enable_gqa
    inputs.push_back(generator);
    Replace(node, graph_->create(c10::Symbol::fromQualString("gpipe::scaled_dot_product_attention"),
                                 inputs, 1));
    return true;
  }

  // rand_like(x, dtype, layout, device, pin, format) -> empty_like(...) then the in-place draw.
  bool KeyLike(Node* node) {
    const std::string name = node->kind().toQualString();
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (schema == nullptr) return false;
    const size_t n = node->inputs().size();
    if (n < 6) return false;
    std::vector<Value*> empty_args{node->input(0)};
    for (size_t k = n - 5; k < n; ++k) empty_args.push_back(node->input(k));
    auto draw = [&](c10::Symbol kind, std::vector<Value*> bounds) {
      Value* generator = NextGenerator(node);
      Node* empty = graph_->create(c10::aten::empty_like, empty_args, 1);
      empty->copyMetadata(node);
      empty->insertBefore(node);
      empty->output()->setType(node->output()->type());
      std::vector<Value*> args{empty->output()};
      args.insert(args.end(), bounds.begin(), bounds.end());
      args.push_back(generator);
      Replace(node, graph_->create(kind, args, 1));
    };
    torch::jit::WithInsertPoint guard(node);
    if (name == "aten::rand_like" && n == 6) {
      draw(c10::Symbol::fromQualString("aten::uniform_"),
           {graph_->insertConstant(0.0), graph_->insertConstant(1.0)});
      return true;
    }
    if (name == "aten::randn_like" && n == 6) {
      draw(c10::Symbol::fromQualString("aten::normal_"),
           {graph_->insertConstant(0.0), graph_->insertConstant(1.0)});
      return true;
    }
    if (name == "aten::randint_like" && (n == 7 || n == 8)) {  // (self, high, ...) or (self, low, high, ...)
      Value* low = n == 8 ? node->input(1) : graph_->insertConstant(static_cast<int64_t>(0));
      Value* high = n == 8 ? node->input(2) : node->input(1);
      draw(c10::Symbol::fromQualString("aten::random_"), {low, high});
      return true;
    }
    return false;
  }

  void KeyBlock(torch::jit::Block* block) {
    for (auto it = block->nodes().begin(); it != block->nodes().end();) {
      Node* node = *it;
      ++it;  // the node may be replaced
      for (torch::jit::Block* sub : node->blocks()) KeyBlock(sub);
      if (auto dropout = DropoutOf(node)) {
        KeyDropout(node, *dropout);
        continue;
      }
      if (KeyAttention(node)) continue;
      if (std::optional<size_t> k = GeneratorArgument(node)) {
        if (IsNoneValue(node->input(*k))) {
          GRAPH_UPDATE("keyed the generator of ", *node);
          node->replaceInput(*k, NextGenerator(node));
        }
        continue;
      }
      if (!node->isNondeterministic()) continue;
      if (KeyLike(node)) continue;
      if (const c10::FunctionSchema* overload = GeneratorOverload(node)) {
        Value* generator = NextGenerator(node);
        std::vector<Value*> inputs;
        size_t k = 0;
        for (const c10::Argument& arg : overload->arguments()) {
          inputs.push_back(arg.name() == "generator" ? generator : node->input(k++));
        }
        Replace(node, graph_->create(node->kind(), inputs, 1));
        continue;
      }
      TORCH_CHECK(false, "the model draws random numbers with ", node->kind().toQualString(),
                  ", which gpipe-compile cannot give a keyed generator (it has no generator "
                  "argument); draw with an op that takes one (torch.rand, torch.bernoulli, "
                  "dropout, ...) instead");
    }
  }

  std::shared_ptr<Graph> graph_;
  size_t next_op_ = 0;
  bool changed_ = false;
};

}  // namespace

bool KeyRandomOps(std::shared_ptr<Graph>& graph) {
  bool changed = RandomOpKeyer(graph).Run();
  if (changed) GRAPH_DUMP("after KeyRandomOps", graph);
  return changed;
}

}  // namespace gpipe
