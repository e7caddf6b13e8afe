#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "passes/split_stages.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using torch::jit::testing::FileCheck;

auto Parse = testing::ParseGraph;

ValueRef FromStage(size_t stage, size_t index) { return {ValueRef::Origin::StageOutput, stage, index}; }
ValueRef FromInput(size_t index) { return {ValueRef::Origin::ModelInput, 0, index}; }

size_t NumOutputs(const StageGraph& s) { return s.graph->outputs()[0]->node()->inputs().size(); }

// %a is made on stage 0 and used again on stage 3: a skip route 0 -> 3.
constexpr const char* kSkipGraph = R"IR(
graph(%x : Tensor, %w0 : Tensor, %w1 : Tensor, %w2 : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = a::aaa(%x, %w0, %one)
  %b : Tensor = a::bbb(%a, %w1)
  %c : Tensor = a::ccc(%b, %one)
  %d : Tensor = a::ddd(%c, %a, %w2)
  return (%d))IR";

TEST(SplitStages, SkipValueTravelsDirectlyToItsConsumer) {
  auto graph = Parse(kSkipGraph);
  auto split = SplitStages(graph, StagePlan{{0, 2, 3, 4}}, /*num_model_inputs=*/1);
  ASSERT_EQ(split.stages.size(), 4u);
  const auto& s = split.stages;
  EXPECT_EQ(s[0].activation_inputs, (std::vector<ValueRef>{FromInput(0)}));
  EXPECT_EQ(s[0].attribute_inputs, (std::vector<size_t>{0}));
  EXPECT_EQ(NumOutputs(s[0]), 1u);  // %a, once, though two stages read it
  EXPECT_EQ(s[1].activation_inputs, (std::vector<ValueRef>{FromStage(0, 0)}));
  EXPECT_EQ(s[1].attribute_inputs, (std::vector<size_t>{1}));
  // Stages 1 and 2 neither receive nor forward %a: one input, one output each.
  EXPECT_EQ(NumOutputs(s[1]), 1u);
  EXPECT_EQ(s[2].activation_inputs, (std::vector<ValueRef>{FromStage(1, 0)}));
  EXPECT_EQ(NumOutputs(s[2]), 1u);
  EXPECT_EQ(s[3].activation_inputs, (std::vector<ValueRef>{FromStage(2, 0), FromStage(0, 0)}));
  EXPECT_EQ(s[3].attribute_inputs, (std::vector<size_t>{2}));
  EXPECT_EQ(split.model_outputs, (std::vector<ValueRef>{FromStage(3, 0)}));
  // The constant is cloned into each stage that uses it, never passed.
  FileCheck().check_count("prim::Constant[value=1]", 1, /*exactly=*/true)->check("a::aaa")->run(*s[0].graph);
  FileCheck().check_count("prim::Constant[value=1]", 1, true)->check("a::ccc")->run(*s[2].graph);
  FileCheck().check_not("prim::Constant")->run(*s[1].graph);
  // Activations come first, attributes last, then one tuple output.
  torch::jit::Graph& g3 = *s[3].graph;
  ASSERT_EQ(g3.inputs().size(), 3u);
  EXPECT_EQ(g3.inputs()[2]->debugName(), "w2");
  torch::jit::Node* ddd = g3.inputs()[0]->uses().at(0).user;
  EXPECT_EQ(ddd->kind().toQualString(), std::string("a::ddd"));
  EXPECT_EQ(ddd->inputs().vec(), (std::vector<torch::jit::Value*>{g3.inputs()[0], g3.inputs()[1], g3.inputs()[2]}));
  FileCheck().check("a::ddd")->check("prim::TupleConstruct")->run(g3);
}

TEST(SplitStages, PassThroughRoutingRelaysTheSkipThroughEveryStageBetween) {
  auto graph = Parse(kSkipGraph);
  auto split = SplitStages(graph, StagePlan{{0, 2, 3, 4}}, 1, SkipRouting::PassThrough);
  const auto& s = split.stages;
  // %a: stage 0 -> 1 -> 2 -> 3, each stage between returning its input unchanged.
  EXPECT_EQ(NumOutputs(s[0]), 1u);
  EXPECT_EQ(s[1].activation_inputs, (std::vector<ValueRef>{FromStage(0, 0)}));  // %a feeds %b here anyway
  EXPECT_EQ(NumOutputs(s[1]), 2u);
  EXPECT_EQ(s[2].activation_inputs, (std::vector<ValueRef>{FromStage(1, 0), FromStage(1, 1)}));
  EXPECT_EQ(NumOutputs(s[2]), 2u);
  torch::jit::Graph& g2 = *s[2].graph;
  EXPECT_EQ(g2.outputs()[0]->node()->inputs()[1], g2.inputs()[1]) << "stage 2 hands %a on untouched";
  EXPECT_EQ(s[3].activation_inputs, (std::vector<ValueRef>{FromStage(2, 0), FromStage(2, 1)}));
  EXPECT_EQ(split.model_outputs, (std::vector<ValueRef>{FromStage(3, 0)}));
}

TEST(SplitStages, OneStageKeepsTheWholeGraph) {
  auto graph = Parse(kSkipGraph);
  auto split = SplitStages(graph, StagePlan{{0}}, 1);
  ASSERT_EQ(split.stages.size(), 1u);
  EXPECT_EQ(split.stages[0].activation_inputs, (std::vector<ValueRef>{FromInput(0)}));
  EXPECT_EQ(split.stages[0].attribute_inputs, (std::vector<size_t>{0, 1, 2}));
  FileCheck().check("a::aaa")->check("a::bbb")->check("a::ccc")->check("a::ddd")->run(*split.stages[0].graph);
  // The input graph is left as it was.
  FileCheck().check_count("a::", 4, true)->run(*graph);
}

TEST(SplitStages, IfNodeStaysWholeAndReadsOuterValues) {
  auto graph = Parse(R"IR(
graph(%x : Tensor, %flag : bool):
  %a : Tensor = a::aaa(%x)
  %b : Tensor = prim::If(%flag)
    block0():
      %t : Tensor = a::bbb(%a, %x)
      -> (%t)
    block1():
      -> (%a)
  %d : Tensor = a::ccc(%b)
  return (%d))IR");
  auto split = SplitStages(graph, StagePlan{{0, 1}}, /*num_model_inputs=*/2);
  const auto& s1 = split.stages[1];
  FileCheck().check("prim::If")->check("a::bbb")->check("a::ccc")->run(*s1.graph);
  FileCheck().check_not("prim::If")->run(*split.stages[0].graph);
  // The block's outer reads (%a, %x) and the condition became stage inputs.
  EXPECT_EQ(s1.activation_inputs, (std::vector<ValueRef>{FromInput(1), FromStage(0, 0), FromInput(0)}));
}

TEST(SplitStages, ValueUsedByTwoLaterStagesIsOneOutput) {
  auto graph = Parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = a::aaa(%x)
  %b : Tensor = a::bbb(%a)
  %c : Tensor = a::ccc(%a, %b)
  return (%c, %a))IR");
  auto split = SplitStages(graph, StagePlan{{0, 1, 2}}, 1);
  EXPECT_EQ(NumOutputs(split.stages[0]), 1u);
  EXPECT_EQ(split.model_outputs, (std::vector<ValueRef>{FromStage(2, 0), FromStage(0, 0)}));
}

TEST(SplitStages, RejectsPlansThatLeaveAStageEmpty) {
  auto graph = Parse(kSkipGraph);
  EXPECT_THROW(SplitStages(graph, StagePlan{{0, 2, 2}}, 1), c10::Error);
  EXPECT_THROW(SplitStages(graph, StagePlan{{1}}, 1), c10::Error);
  EXPECT_THROW(SplitStages(graph, StagePlan{{0, 9}}, 1), c10::Error);
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(SplitStages, SharedAttributeIsOwnedByItsFirstUserAndRoutedToTheOthers) {
  // Tied weights: %emb is read on stage 0 (lookup) and stage 2 (output head).
  auto graph = Parse(R"IR(
graph(%ids : Tensor, %emb : Tensor, %w : Tensor, %training : bool):
  %h : Tensor = a::embed(%emb, %ids, %training)
  %g : Tensor = a::mix(%h, %w)
  %logits : Tensor = a::head(%g, %emb, %training)
  return (%logits))IR");
  auto split = SplitStages(graph, StagePlan{{0, 1, 2}}, /*num_model_inputs=*/1);
  const auto& s = split.stages;
  EXPECT_EQ(s[0].attribute_inputs, (std::vector<size_t>{0, 2}));  // emb and the flag
  EXPECT_EQ(NumOutputs(s[0]), 2u);                                 // h, and emb for stage 2
  EXPECT_EQ(s[2].activation_inputs, (std::vector<ValueRef>{FromStage(1, 0), FromStage(0, 1)}));
  // The bool flag is not a tensor to share: stage 2 reads its own copy.
  EXPECT_EQ(s[2].attribute_inputs, (std::vector<size_t>{2}));
  EXPECT_EQ(s[1].attribute_inputs, (std::vector<size_t>{1}));
}

}  // namespace
}  // namespace gpipe
