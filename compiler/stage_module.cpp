#include "compiler/stage_module.h"

#include <algorithm>
#include <cctype>

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/ir/alias_analysis.h>

#include "passes/defer_weight_gradients.h"
#include "runtime/keyed_random.h"
#include "runtime/stage.h"

namespace gpipe {
namespace {

std::string AttributeName(size_t index, const std::string& dotted) {
  std::string name = "p" + std::to_string(index) + "_";
  for (char c : dotted) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

// TorchScript source of the commit method for the deferred batch norms this
// stage owns: ATen's running-statistics update (in double), once, from the
// whole batch's sums.
std::string CommitSource(const std::vector<DeferredBatchNorm>& deferred,
                         const std::vector<LiftedAttribute>& attributes,
                         const std::vector<size_t>& owned, size_t stage_index) {
  auto name = [&](size_t a) { return "self." + AttributeName(a, attributes[a].name); };
  auto owns = [&](size_t a) { return std::find(owned.begin(), owned.end(), a) != owned.end(); };
  std::string body;
  for (const auto& d : deferred) {
    if (!owns(d.sum)) continue;
    for (size_t a : {d.running_mean, d.running_var}) {
      TORCH_CHECK(owns(a), "--deferred-batch-norm: stage ", stage_index, " runs batch norm '",
                  attributes[d.sum].name, "' but not its running statistics");
    }
    std::string m = std::to_string(d.momentum);
    std::string rm = name(d.running_mean), rv = name(d.running_var);
    body += "    if bool(" + name(d.calls) + " > 0):\n";
    body += "        n = " + name(d.count) + "\n";
    body += "        mean = " + name(d.sum) + " / n\n";
    body += "        var = (" + name(d.sum_squares) + " / n - mean * mean) * (n / (n - 1.0))\n";
    body += "        " + rm + ".copy_(" + m + " * mean + (1.0 - " + m + ") * " + rm + ".double())\n";
    body += "        " + rv + ".copy_(" + m + " * var + (1.0 - " + m + ") * " + rv + ".double())\n";
    if (d.num_batches_tracked >= 0 && owns(static_cast<size_t>(d.num_batches_tracked))) {
      // The graph counted every micro-batch; a mini-batch counts once.
      body += "        " + name(static_cast<size_t>(d.num_batches_tracked)) + ".sub_(int(float(" +
              name(d.calls) + ")) - 1)\n";
    }
    for (size_t a : {d.sum, d.sum_squares, d.count, d.calls}) body += "        " + name(a) + ".zero_()\n";
  }
  if (body.empty()) return "";
  return "def gpipe_commit_batch_norm(self):\n" + body + "    return None\n";
}

// A copy of `graph` as a method of `m`: `self` first, and each input after
// the first `leading_inputs` (an attribute) read from self instead.
std::shared_ptr<torch::jit::Graph> ReadAttributesFromSelf(
    const std::shared_ptr<torch::jit::Graph>& original, const torch::jit::Module& m,
    size_t leading_inputs, const std::vector<std::string>& attribute_names) {
  auto graph = original->copy();
  torch::jit::Value* self = graph->insertInput(0, "self")->setType(m._ivalue()->type());
  const size_t first_attribute = 1 + leading_inputs;
  TORCH_INTERNAL_ASSERT(graph->inputs().size() == first_attribute + attribute_names.size());
  {
    torch::jit::WithInsertPoint at_start(graph->block()->nodes().front());
    for (size_t k = 0; k < attribute_names.size(); ++k) {
      torch::jit::Value* read = graph->insertGetAttr(self, attribute_names[k]);
      graph->inputs()[first_attribute + k]->replaceAllUsesWith(read);
    }
  }
  for (size_t k = attribute_names.size(); k > 0; --k) graph->eraseInput(first_attribute + k - 1);
  return graph;
}

}  // namespace

BuiltStage BuildStageModule(const StageGraph& stage, const std::vector<LiftedAttribute>& attributes,
                            size_t stage_index, const std::vector<DeferredBatchNorm>& deferred,
                            const RecomputeGraphs* recompute) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  BuiltStage built;
  built.module = torch::jit::Module(
      c10::QualifiedName("__torch__.gpipe.Stage" + std::to_string(stage_index)), cu);
  torch::jit::Module& m = built.module;

  {
    // An in-place op on a stage input (torchvision's ReLU(inplace=True) right
    // after a cut) must not write to the autograd leaf the runtime made.
    torch::jit::AliasDb aliases(stage.graph);
    for (size_t k = 0; k < stage.activation_inputs.size(); ++k) {
      if (aliases.hasWriters(stage.graph->inputs()[k])) built.mutated_inputs.push_back(static_cast<int64_t>(k));
    }
  }
  bool training = true;
  for (const auto& a : attributes) {
    if (a.kind == LiftedAttribute::Kind::TrainingFlag) training = a.value.toBool();
  }
  m.register_attribute("training", c10::BoolType::get(), training);
  std::vector<std::string> attribute_names;  // of each attribute input
  for (size_t index : stage.attribute_inputs) {
    const LiftedAttribute& a = attributes.at(index);
    if (a.kind == LiftedAttribute::Kind::TrainingFlag) {
      attribute_names.push_back("training");
      continue;
    }
    attribute_names.push_back(AttributeName(index, a.name));
    bool is_buffer = a.kind == LiftedAttribute::Kind::Buffer;
    m.register_parameter(attribute_names.back(), a.value.toTensor(), is_buffer);
    built.parameters.push_back({attribute_names.back(), a.name, is_buffer});
  }
  const size_t activations = stage.activation_inputs.size();
  auto add_method = [&](const std::string& name, const std::shared_ptr<torch::jit::Graph>& graph,
                        size_t leading_inputs) {
    auto method = ReadAttributesFromSelf(graph, m, leading_inputs, attribute_names);
    DeferLinearWeightGradients(method);
    m.type()->addMethod(cu->create_function(c10::QualifiedName(*m.type()->name(), name), method));
    return method;
  };
  built.uses_rng = HasKeyedRandomOps(*add_method("forward", stage.graph, activations));
  if (recompute) {
    add_method(kForwardSavingMethod, recompute->forward_saving, activations);
    add_method(kRecomputeMethod, recompute->recompute, activations + recompute->saved_kinds.size());
  }
  std::string commit = CommitSource(deferred, attributes, stage.attribute_inputs, stage_index);
  if (!commit.empty()) m.define(commit);
  return built;
}

}  // namespace gpipe
