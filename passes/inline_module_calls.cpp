// InlineModuleCalls: inline every method and function call, recording the
// full submodule path of each called module.
//
// torch::jit::inlineCallTo takes the module instance name it records from
// the call's receiver: the `name` of the prim::GetAttr that produced it, or
// "SELF" for a call on the caller's own `self`. For a receiver reached by a
// chain of GetAttrs from `self` (containers that are indexed, not called:
// ModuleList, ModuleDict, a plain holder module), the chain's names joined
// with "." are the real path. The pass names the receiver's GetAttr after
// the whole chain for the duration of the inlining, then restores it; the
// inlined nodes keep the recorded path in their call stacks.
//
// Bottom-up: a callee's graph is copied and its own calls are inlined first,
// then it is inlined into the caller with inlineCallTo(node, fn, graph), so
// the recorded stacks read caller -> callee as torch::jit::Inline's do.

#include "passes/inline_module_calls.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/jit_log.h>

namespace gpipe {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

class ModuleCallInliner {
 public:
  bool Run(Graph& graph) {
    InlineBlock(graph.block());
    return changed_;
  }

 private:
  // The callee's graph with its own calls inlined.
  std::shared_ptr<Graph> InlinedBody(torch::jit::GraphFunction& fn) {
    std::shared_ptr<Graph> body = fn.graph()->copy();
    InlineBlock(body->block());
    return body;
  }

  // "layers.0" for a receiver GetAttr("0")(GetAttr("layers")(self)); empty
  // when the receiver is not a chain of two or more GetAttrs from `self`.
  static std::string ChainPath(Value* receiver) {
    std::string path;
    size_t links = 0;
    Value* v = receiver;
    while (v->node()->kind() == c10::prim::GetAttr) {
      const std::string& name = v->node()->s(c10::attr::name);
      path = path.empty() ? name : name + "." + path;
      ++links;
      v = v->node()->input(0);
    }
    Graph* graph = receiver->owningGraph();
    bool from_self = !graph->inputs().empty() && v == graph->inputs()[0];
    return from_self && links >= 2 ? path : "";
  }

  void InlineMethod(Node* call) {
    auto class_type = call->input(0)->type()->cast<c10::ClassType>();
    if (!class_type) return;  // an interface call: left for LiftAttributes to report
    torch::jit::Function* method = class_type->findMethod(call->s(c10::attr::name));
    torch::jit::GraphFunction* fn = method ? torch::jit::tryToGraphFunction(*method) : nullptr;
    if (fn == nullptr) return;
    std::shared_ptr<Graph> body = InlinedBody(*fn);
    Node* receiver = call->input(0)->node();
    std::string path = ChainPath(call->input(0));
    std::string name;
    if (!path.empty()) {
      name = receiver->s(c10::attr::name);
      receiver->s_(c10::attr::name, path);  // what inlineCallTo records as the instance name
    }
    GRAPH_UPDATE("inlining ", fn->name(), path.empty() ? "" : " of " + path);
    torch::jit::inlineCallTo(call, fn, body.get());
    if (!path.empty()) receiver->s_(c10::attr::name, name);
    changed_ = true;
  }

  void InlineFunction(Node* call) {
    auto function_type = call->input(0)->type()->cast<c10::FunctionType>();
    if (!function_type) return;
    torch::jit::GraphFunction* fn = torch::jit::tryToGraphFunction(*function_type->function());
    if (fn == nullptr) return;
    std::shared_ptr<Graph> body = InlinedBody(*fn);
    call->removeInput(0);  // the function constant; the remaining inputs are the arguments
    GRAPH_UPDATE("inlining function ", fn->name());
    torch::jit::inlineCallTo(call, fn, body.get());
    changed_ = true;
  }

  void InlineBlock(Block* block) {
    for (auto it = block->nodes().begin(), end = block->nodes().end(); it != end;) {
      Node* node = *it++;  // inlining replaces `node`; the new nodes go before it
      if (node->kind() == c10::prim::CallMethod) {
        InlineMethod(node);
      } else if (node->kind() == c10::prim::CallFunction) {
        InlineFunction(node);
      } else {
        for (Block* sub : node->blocks()) InlineBlock(sub);
      }
    }
  }

  bool changed_ = false;
};

}  // namespace

bool InlineModuleCalls(torch::jit::Graph& graph) { return ModuleCallInliner().Run(graph); }

}  // namespace gpipe
