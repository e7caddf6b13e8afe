#include "compiler/activation_budget.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include "passes/replayable_products.h"
#include "runtime/memory_tracker.h"

namespace gpipe {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

int64_t BytesOf(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// The product's multiply-adds x 2, from its output and operands.
double ProductFlops(const Node* node, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  const auto n = static_cast<double>(out.numel());
  if (node->kind() == c10::aten::linear) return 2 * n * static_cast<double>(b.dim() > 0 ? b.size(-1) : 1);
  if (node->kind() == c10::aten::matmul || node->kind() == c10::aten::mm || node->kind() == c10::aten::bmm) {
    return 2 * n * static_cast<double>(a.dim() > 0 ? a.size(-1) : 1);
  }
  // convolution: each output element reads (in_channels / groups) x kernel weights
  return 2 * n * static_cast<double>(b.size(0) > 0 ? b.numel() / b.size(0) : 0);
}

// The top-level node that holds `node` (itself, or the one whose block it is in).
const Node* TopLevel(const Node* node, const Graph& graph) {
  while (node->owningBlock() != graph.block()) node = node->owningBlock()->owningNode();
  return node;
}

size_t StageOf(size_t node_index, const StagePlan& plan) {
  size_t s = 0;
  while (s + 1 < plan.num_stages() && plan.first_node[s + 1] <= node_index) ++s;
  return s;
}

}  // namespace

void CheckBudgetCoversEveryStage(const std::vector<StageKeepCosts>& costs, int64_t budget_bytes) {
  // The stage that needs the most, so that the least the message names is
  // enough for all (the first stage below the budget may need less).
  size_t most = 0;
  for (size_t s = 1; s < costs.size(); ++s) {
    if (costs[s].output_bytes > costs[most].output_bytes) most = s;
  }
  if (costs.empty() || costs[most].output_bytes <= budget_bytes) return;
  TORCH_CHECK(false, "--activation-budget ", MiB(budget_bytes), " is below what stage ", most,
              " must keep for each micro-batch in flight: the tensors it hands on, ",
              MiB(costs[most].output_bytes),
              " on the sample's micro-batch, the most of any stage; give at least that, or use "
              "more --chunks (smaller micro-batches)");
}

BudgetChoice ChooseWithinBudget(const StageKeepCosts& costs, int64_t budget_bytes, size_t stage) {
  TORCH_CHECK(costs.output_bytes <= budget_bytes, "--activation-budget ", MiB(budget_bytes),
              " is below what stage ", stage,
              " must keep for each micro-batch in flight: the tensors it hands on, ",
              MiB(costs.output_bytes),
              " on the sample's micro-batch; give at least that, or use more --chunks "
              "(smaller micro-batches)");
  BudgetChoice choice;
  choice.kept_bytes = costs.output_bytes;
  std::vector<const ProductCost*> rest;
  for (const ProductCost& p : costs.products) {
    if (p.is_output) {
      choice.saved_nodes.push_back(p.node);
    } else {
      rest.push_back(&p);
    }
  }
  // Most FLOPs spared per byte first; ties keep graph order.
  std::stable_sort(rest.begin(), rest.end(), [](const ProductCost* a, const ProductCost* b) {
    return a->flops * static_cast<double>(std::max<int64_t>(b->bytes, 1)) >
           b->flops * static_cast<double>(std::max<int64_t>(a->bytes, 1));
  });
  for (const ProductCost* p : rest) {
    if (choice.kept_bytes + p->bytes <= budget_bytes) {
      choice.kept_bytes += p->bytes;
      choice.saved_nodes.push_back(p->node);
    } else {
      choice.recompute_flops += p->flops;
    }
  }
  std::sort(choice.saved_nodes.begin(), choice.saved_nodes.end());
  return choice;
}

std::vector<StageKeepCosts> MeasureKeepCosts(const LoweredModel& lowered, const StagePlan& plan,
                                             const SplitResult& split,
                                             const std::vector<c10::IValue>& micro_batch) {
  // A copy of the whole graph that also returns every product with its two
  // operands, and every tensor a stage hands on.
  std::shared_ptr<Graph> probe = lowered.graph->copy();
  const std::vector<Node*> nodes(probe->nodes().begin(), probe->nodes().end());
  std::map<const Node*, size_t> index_of;
  for (size_t i = 0; i < nodes.size(); ++i) index_of[nodes[i]] = i;
  // Which tensors each stage hands on, found before the probe's own outputs
  // add uses of their own.
  std::vector<std::vector<Value*>> handed_on_values(plan.num_stages());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i]->kind() == c10::prim::Constant) continue;  // cloned into each stage, not handed on
    const size_t s = StageOf(i, plan);
    const size_t end = s + 1 < plan.num_stages() ? plan.first_node[s + 1] : nodes.size();
    for (Value* v : nodes[i]->outputs()) {
      if (!v->type()->isSubtypeOf(*c10::TensorType::get())) continue;
      const bool crosses = std::any_of(v->uses().begin(), v->uses().end(), [&](const torch::jit::Use& use) {
        const Node* user = TopLevel(use.user, *probe);
        return user->kind() == c10::prim::Return || index_of.at(user) >= end;
      });
      if (crosses) handed_on_values[s].push_back(v);
    }
  }
  const size_t first_extra = probe->outputs().size();
  std::vector<size_t> products;  // node indices, in order
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node* node = nodes[i];
    if (!ReplayOpOf(node)) continue;
    products.push_back(i);
    probe->registerOutput(node->output());
    probe->registerOutput(node->input(0));
    probe->registerOutput(node->input(1));
  }
  std::vector<std::vector<size_t>> handed_on(plan.num_stages());  // probe output positions
  for (size_t s = 0; s < plan.num_stages(); ++s) {
    for (Value* v : handed_on_values[s]) {
      handed_on[s].push_back(probe->outputs().size());
      probe->registerOutput(v);
    }
  }

  torch::jit::Stack stack(micro_batch.begin(), micro_batch.end());
  for (const LiftedAttribute& a : lowered.attributes) {
    if (a.kind == LiftedAttribute::Kind::TrainingFlag) {
      // Eval: a training batch norm refuses a micro-batch of one, and the
      // products' shapes do not depend on the mode.
      stack.emplace_back(false);
    } else if (a.kind == LiftedAttribute::Kind::Buffer && a.value.isTensor()) {
      stack.emplace_back(a.value.toTensor().clone());  // batch norm's running statistics move
    } else {
      stack.push_back(a.value);
    }
  }
  TORCH_CHECK(stack.size() == probe->inputs().size(), "--activation-budget: the model takes ",
              probe->inputs().size(), " inputs with its attributes, the sample gives ", stack.size());
  try {
    at::NoGradGuard no_grad;
    torch::jit::Code code(probe, "gpipe_activation_budget_probe");
    torch::jit::InterpreterState(code).run(stack);
  } catch (const std::exception& e) {
    std::string what = e.what();
    TORCH_CHECK(false, "--activation-budget: the model failed on one micro-batch of the sample, where "
                "what each stage keeps is measured (", what.substr(0, what.find('\n')),
                "); give a --sample-input it runs on");
  }
  TORCH_INTERNAL_ASSERT(stack.size() == probe->outputs().size());
  auto tensor = [&](size_t position) {
    return stack[position].isTensor() ? stack[position].toTensor() : at::Tensor();
  };

  std::vector<StageKeepCosts> costs(plan.num_stages());
  std::vector<std::set<const void*>> output_storages(plan.num_stages());
  for (size_t s = 0; s < plan.num_stages(); ++s) {
    for (size_t position : handed_on[s]) {
      at::Tensor t = tensor(position);
      if (!t.defined() || !t.has_storage()) continue;
      if (output_storages[s].insert(t.storage().unsafeGetStorageImpl()).second) {
        costs[s].output_bytes += static_cast<int64_t>(t.storage().nbytes());
      }
    }
  }
  // The k-th product of a stage's node range is the k-th of its stage graph
  // (SplitStages copies the range in order and adds no products).
  std::vector<std::vector<size_t>> measured(plan.num_stages());  // index into `products`
  for (size_t k = 0; k < products.size(); ++k) measured[StageOf(products[k], plan)].push_back(k);
  for (size_t s = 0; s < plan.num_stages(); ++s) {
    const auto& stage_graph = split.stages[s].graph;
    const std::vector<size_t> in_stage = ReplayableProducts(stage_graph);
    TORCH_INTERNAL_ASSERT(in_stage.size() == measured[s].size(), "stage ", s, " has ",
                          in_stage.size(), " products, its node range ", measured[s].size());
    const std::vector<size_t> savable = SavableProducts(stage_graph);
    const std::vector<Node*> stage_nodes(stage_graph->nodes().begin(), stage_graph->nodes().end());
    for (size_t k = 0; k < in_stage.size(); ++k) {
      if (!std::binary_search(savable.begin(), savable.end(), in_stage[k])) continue;
      const size_t at = first_extra + 3 * measured[s][k];
      at::Tensor out = tensor(at), a = tensor(at + 1), b = tensor(at + 2);
      if (!out.defined() || !a.defined() || !b.defined()) continue;
      ProductCost cost;
      cost.node = in_stage[k];
      cost.bytes = BytesOf(out);
      cost.flops = ProductFlops(stage_nodes[in_stage[k]], out, a, b);
      cost.is_output = out.has_storage() &&
                       output_storages[s].count(out.storage().unsafeGetStorageImpl()) > 0;
      costs[s].products.push_back(cost);
    }
  }
  return costs;
}

}  // namespace gpipe
