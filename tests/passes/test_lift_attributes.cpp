#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "passes/lift_attributes.h"
#include "tests/passes/module_builders.h"

namespace gpipe {
namespace {

using testing::InlinedForward;
using testing::ParentModule;
using testing::ScaleModule;
using torch::jit::testing::FileCheck;

torch::jit::Module TwoChildren() {
  return ParentModule("Two", {{"a", ScaleModule("A", 1.0)}, {"b", ScaleModule("B", 2.0)}}, R"(
    def forward(self, x):
        return self.b.forward(self.a.forward(x))
  )");
}

TEST(LiftAttributes, TensorsBecomeInputsAndOtherAttributesConstants) {
  auto m = TwoChildren();
  auto graph = InlinedForward(m);
  auto lifted = LiftAttributes(graph, m._ivalue());

  FileCheck().check_not("prim::GetAttr")->run(*graph);
  FileCheck().check("prim::Constant[value=0.5")->run(*graph);
  ASSERT_EQ(lifted.size(), 4u);
  EXPECT_EQ(lifted[0].name, "a.weight");
  EXPECT_EQ(lifted[0].kind, LiftedAttribute::Kind::Parameter);
  EXPECT_EQ(lifted[1].name, "a.scale");
  EXPECT_EQ(lifted[1].kind, LiftedAttribute::Kind::Buffer);
  EXPECT_EQ(lifted[2].name, "b.weight");
  EXPECT_EQ(lifted[3].name, "b.scale");
  // self is gone; x plus one input per lifted tensor, in the returned order.
  ASSERT_EQ(graph->inputs().size(), 5u);
  EXPECT_EQ(graph->inputs()[1]->debugName(), "a_weight");
  // The lifted value is the module's own tensor, so gradients land on it.
  EXPECT_TRUE(lifted[2].value.toTensor().is_same(m.attr("b").toModule().attr("weight").toTensor()));
}

TEST(LiftAttributes, TiedTensorIsOneInput) {
  auto a = ScaleModule("TA", 1.0);
  auto b = ScaleModule("TB", 2.0);
  b.setattr("weight", a.attr("weight"));
  auto m = ParentModule("Tied", {{"a", a}, {"b", b}}, R"(
    def forward(self, x):
        return self.b.forward(self.a.forward(x))
  )");
  auto graph = InlinedForward(m);
  auto lifted = LiftAttributes(graph, m._ivalue());
  int weights = 0;
  for (const auto& l : lifted) weights += l.name.find("weight") != std::string::npos;
  EXPECT_EQ(weights, 1);
  EXPECT_EQ(graph->inputs().size(), 1u + lifted.size());
}

TEST(LiftAttributes, TrainingFlagIsOneSharedBoolInput) {
  auto child = ScaleModule("FlagChild", 1.0);
  auto m = ParentModule("Flag", {{"a", child}}, R"(
    def forward(self, x):
        y = self.a.forward(x)
        if self.training:
            y = y + 1
        return y
  )");
  auto graph = InlinedForward(m);
  auto lifted = LiftAttributes(graph, m._ivalue());
  ASSERT_FALSE(lifted.empty());
  EXPECT_EQ(lifted.back().kind, LiftedAttribute::Kind::TrainingFlag);
  EXPECT_TRUE(lifted.back().value.toBool());
  FileCheck().check("bool")->check("prim::If(%training)")->run(*graph);
}

TEST(LiftAttributes, NoAttributesOnlyRemovesSelf) {
  auto m = ParentModule("Plain", {}, R"(
    def forward(self, x):
        return x + 1
  )");
  auto graph = InlinedForward(m);
  auto lifted = LiftAttributes(graph, m._ivalue());
  EXPECT_TRUE(lifted.empty());
  ASSERT_EQ(graph->inputs().size(), 1u);
  FileCheck().check("aten::add")->run(*graph);
}

TEST(LiftAttributes, AttributeAssignmentIsAClearError) {
  auto m = ParentModule("Assign", {}, R"(
    def forward(self, x):
        self.training = False
        return x
  )");
  auto graph = InlinedForward(m);
  try {
    LiftAttributes(graph, m._ivalue());
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("assigns module attribute 'training'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gpipe
