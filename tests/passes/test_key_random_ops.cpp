#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/torch.h>

#include "passes/key_random_ops.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using torch::jit::testing::FileCheck;

auto Parse = testing::ParseGraph;

TEST(KeyRandomOps, DropoutAndGeneratorOpsDrawFromKeyedGeneratorsInGraphOrder) {
  auto graph = Parse(R"IR(
graph(%x : Tensor):
  %p : float = prim::Constant[value=0.1]()
  %t : bool = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::dropout(%x, %p, %t)
  %z : Tensor = aten::feature_alpha_dropout(%y, %p, %t)
  %b : Tensor = aten::bernoulli(%z, %none)
  %r : Tensor = aten::rand_like(%x, %none, %none, %none, %none, %none)
  %size : int[] = prim::ListConstruct()
  %n : Tensor = aten::randn(%size, %none, %none, %none, %none)
  %out : Tensor = aten::add(%b, %r, %p)
  %out2 : Tensor = aten::add(%out, %n, %p)
  return (%out2))IR");
  EXPECT_TRUE(KeyRandomOps(graph));
  FileCheck()
      .check("gpipe::keyed_generator(%")
      ->check("gpipe::dropout(%x, %")
      ->check("gpipe::keyed_generator")
      ->check("gpipe::dropout(%")
      ->check("gpipe::keyed_generator")
      ->check("aten::bernoulli(%")
      ->check("gpipe::keyed_generator")
      ->check("aten::empty_like(%x")
      ->check("aten::uniform_")
      ->check("gpipe::keyed_generator")
      ->check("aten::randn(%")
      ->run(*graph);
  FileCheck().check_not("aten::dropout")->check_not("aten::rand_like")->run(*graph);
  FileCheck().check_count("gpipe::keyed_generator", 5, /*exactly=*/true)->run(*graph);
  // The ops are numbered 0..4 in graph order.
  std::vector<int64_t> ids;
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->kind().toQualString() == std::string("gpipe::keyed_generator"))
      ids.push_back(torch::jit::toIValue(node->input(0))->toInt());
  }
  EXPECT_EQ(ids, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Each rewritten op's schema resolves (randn's generator overload among them).
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->kind().is_aten()) {
      EXPECT_NE(node->maybeSchema(), nullptr) << *node;
    }
  }
}

TEST(KeyRandomOps, AGraphWithoutRandomOpsOrWithAGivenGeneratorIsUnchanged) {
  auto graph = Parse(R"IR(
graph(%x : Tensor, %g : Generator):
  %p : float = prim::Constant[value=0.5]()
  %b : Tensor = aten::bernoulli(%x, %p, %g)
  %y : Tensor = aten::relu(%b)
  return (%y))IR");
  EXPECT_FALSE(KeyRandomOps(graph));
  FileCheck().check("aten::bernoulli(%x, %")->check_not("gpipe::")->run(*graph);
}

// Attention's dropout has no generator in ATen: the call becomes the keyed
// op, with torch 2.1's missing enable_gqa filled in.
TEST(KeyRandomOps, AttentionBecomesTheKeyedAttention) {
  auto graph = Parse(R"IR(
graph(%q : Tensor, %k : Tensor, %v : Tensor, %p : float):
  %none : NoneType = prim::Constant()
  %f : bool = prim::Constant[value=0]()
  %a : Tensor = aten::scaled_dot_product_attention(%q, %k, %v, %none, %p, %f, %none)
  return (%a))IR");
  EXPECT_TRUE(KeyRandomOps(graph));
  FileCheck()
      .check("gpipe::keyed_generator(")
      ->check("gpipe::scaled_dot_product_attention(%q, %k, %v, %")
      ->check_not("aten::scaled_dot_product_attention")
      ->run(*graph);
  torch::jit::Node* attention = graph->outputs()[0]->node();
  ASSERT_EQ(attention->inputs().size(), 9u);
  EXPECT_EQ(attention->input(4)->debugName(), "p");  // the call's own arguments, in order
  EXPECT_TRUE(attention->input(6)->type()->kind() == c10::TypeKind::NoneType);  // scale
  const auto enable_gqa = torch::jit::toIValue(attention->input(7));
  ASSERT_TRUE(enable_gqa.has_value());
  EXPECT_FALSE(enable_gqa->toBool());
  EXPECT_EQ(attention->input(8)->node()->kind().toQualString(), std::string("gpipe::keyed_generator"));
}

TEST(KeyRandomOps, InPlaceDropoutWritesTheKeyedResultBack) {
  auto graph = Parse(R"IR(
graph(%x : Tensor):
  %p : float = prim::Constant[value=0.5]()
  %t : bool = prim::Constant[value=1]()
  %y : Tensor = aten::dropout_(%x, %p, %t)
  return (%y))IR");
  EXPECT_TRUE(KeyRandomOps(graph));
  FileCheck().check("gpipe::dropout(%x")->check("aten::copy_(%x")->check_not("aten::dropout_")->run(*graph);
}

TEST(KeyRandomOps, ARandomOpWithoutAGeneratorArgumentIsAnErrorNamingIt) {
  auto graph = Parse(R"IR(
graph(%x : Tensor):
  %p : float = prim::Constant[value=0.5]()
  %t : bool = prim::Constant[value=1]()
  %y : Tensor, %mask : Tensor = aten::native_dropout(%x, %p, %t)
  return (%y))IR");
  try {
    KeyRandomOps(graph);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(),
              "the model draws random numbers with aten::native_dropout, which gpipe-compile cannot "
              "give a keyed generator (it has no generator argument); draw with an op that takes "
              "one (torch.rand, torch.bernoulli, dropout, ...) instead");
  }
}

}  // namespace
}  // namespace gpipe
