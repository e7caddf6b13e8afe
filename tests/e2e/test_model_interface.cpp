// The pipeline is called like the model it came from: forward's arguments by
// position and by name with their defaults, results in the model's own
// structure, bad inputs named at the boundary.

#include <gtest/gtest.h>

#include "compiler/compile.h"
#include "runtime/model_interface.h"
#include "runtime/pipeline.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::Options;
using testing::RunCli;
using testing::TempDir;
using testing::TestModel;

Pipeline Compile(const TempDir& dir, const std::string& model, int64_t stages,
                 const std::string& sample) {
  CompileOptions options = Options(stages, 2);
  options.sample_inputs = ParseInputSpecs(sample);
  CompileModel(TestModel(model), dir.path("m.gpipe"), options);
  return Pipeline::load(dir.path("m.gpipe"));
}

// Every leaf equal, with the same paths; returns the sum of the floating tensor leaves.
at::Tensor ExpectSameResult(const c10::IValue& got, const c10::IValue& want) {
  auto g = FlattenWithPaths(got), w = FlattenWithPaths(want);
  EXPECT_EQ(g.size(), w.size());
  at::Tensor total = torch::zeros({});
  for (size_t k = 0; k < g.size() && k < w.size(); ++k) {
    EXPECT_EQ(g[k].first, w[k].first);
    EXPECT_EQ(g[k].second.tagKind(), w[k].second.tagKind()) << g[k].first;
    if (g[k].second.isTensor() && w[k].second.isTensor()) {
      EXPECT_TRUE(torch::allclose(g[k].second.toTensor(), w[k].second.toTensor(), 1e-6, 1e-6))
          << g[k].first;
      if (g[k].second.toTensor().is_floating_point()) total = total + g[k].second.toTensor().sum();
    } else if (!g[k].second.isNone()) {
      EXPECT_EQ(g[k].second, w[k].second) << g[k].first;
    }
  }
  return total;
}

using testing::ErrorOf;
using testing::LastLine;

TEST(ModelInterface, OptionalArgumentsOmittedOrGivenByPositionOrName) {
  TempDir dir;
  Pipeline pipe = Compile(dir, "optional_args.pt", 2, "4x6");
  ASSERT_EQ(pipe.signature().size(), 3u);
  EXPECT_EQ(SignatureText(pipe.signature()),
            "forward(x: Tensor, mask: Optional[Tensor] = None, scale: float = 1.)");
  auto original = torch::jit::load(TestModel("optional_args.pt"));
  original.eval();
  pipe.eval();
  torch::manual_seed(0);
  at::Tensor x = torch::randn({4, 6});
  at::Tensor mask = (torch::rand({4}) > 0.5).to(at::kFloat);  // per sample: micro-batched with x
  ExpectSameResult(pipe({x}), original.forward({x}));
  ExpectSameResult(pipe({x, mask, 2.0}), original.forward({x, mask, 2.0}));
  ExpectSameResult(pipe({x}, {{"scale", 2.0}, {"mask", mask}}),
                   original.forward({x}, {{"scale", 2.0}, {"mask", mask}}));
  ExpectSameResult(pipe({x}, {{"scale", int64_t{3}}}),
                   original.forward({x, c10::IValue(), 3.0}));  // an int for a float
  EXPECT_TRUE(pipe({x}).isGenericDict());

  EXPECT_EQ(ErrorOf([&] {
              pipe({x}, {{"nope", x}});
            }),
            "the model has no argument 'nope'; forward(x: Tensor, mask: Optional[Tensor] = None, "
            "scale: float = 1.)");
  EXPECT_EQ(ErrorOf([&] {
              pipe({x, mask}, {{"mask", mask}});
            }),
            "argument 'mask' is given both by position and by name; give it once");
  EXPECT_EQ(
      ErrorOf([&] { pipe({}); }),
      "argument 'x' (Tensor) is missing and has no default; pass it: forward(x: Tensor, mask: "
      "Optional[Tensor] = None, scale: float = 1.)");
  EXPECT_EQ(ErrorOf([&] {
              pipe({x, x, x, x});
            }),
            "the model takes 3 arguments but got 4; forward(x: Tensor, mask: Optional[Tensor] = "
            "None, scale: float = 1.)");
  EXPECT_EQ(ErrorOf([&] {
              pipe({x, int64_t{1}});
            }),
            "argument 'mask' must be a tensor but got Int; pass a tensor (forward takes mask: "
            "Optional[Tensor])");
}

// timm's ViT pattern: left at their defaults, the arguments forward branches
// on around its blocks are fixed, so the blocks can be split; the artifact
// then refuses other values for them, and giving one at compile time keeps it.
TEST(ModelInterface, OmittedArgumentsABranchAroundTheLayersDependsOnAreFixed) {
  TempDir dir;
  CompileOptions options = Options(2, 2);
  options.sample_inputs = ParseInputSpecs("4x8");
  auto report = CompileModel(TestModel("branch_args.pt"), dir.path("m.gpipe"), options);
  EXPECT_EQ(report.specialized, (std::vector<std::string>{"mask=None", "is_causal=False"}));
  EXPECT_EQ(report.manifest.stages.size(), 2u);
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"));
  EXPECT_TRUE(pipe.signature()[1].specialized);
  auto original = torch::jit::load(TestModel("branch_args.pt"));
  at::Tensor x = torch::randn({4, 8});
  ExpectSameResult(pipe({x}), original.forward({x}));
  ExpectSameResult(pipe({x}, {{"is_causal", false}}), original.forward({x}));
  EXPECT_EQ(ErrorOf([&] { pipe({x}, {{"is_causal", true}}); }),
            "argument 'is_causal' was fixed to its default False when the model was compiled (forward "
            "branches on it around its layers, and no --sample-input gave it); recompile with "
            "--sample-input is_causal=... to pass it");
  EXPECT_EQ(ErrorOf([&] { pipe({x, torch::ones({4, 1})}); }),
            "argument 'mask' was fixed to its default None when the model was compiled (forward branches "
            "on it around its layers, and no --sample-input gave it); recompile with --sample-input "
            "mask=... to pass it");

  // A branch kept is one unit with everything in it: one stage here.
  options.balance.num_stages = 1;
  options.sample_inputs = ParseInputSpecs("4x8,is_causal=true");
  auto kept = CompileModel(TestModel("branch_args.pt"), dir.path("k.gpipe"), options);
  EXPECT_EQ(kept.specialized, (std::vector<std::string>{"mask=None"}));  // mask alone still branches
  Pipeline with_flag = Pipeline::load(dir.path("k.gpipe"));
  ExpectSameResult(with_flag({x, c10::IValue(), true}), original.forward({x, c10::IValue(), true}));
}

TEST(ModelInterface, DictOutputsCarryGradientsToEveryParameter) {
  TempDir dir;
  Pipeline pipe = Compile(dir, "optional_args.pt", 2, "4x6");
  auto original = torch::jit::load(TestModel("optional_args.pt"));
  torch::manual_seed(1);
  at::Tensor x = torch::randn({4, 6});
  at::Tensor mask = torch::rand({4});
  ExpectSameResult(original.forward({x, mask}), original.forward({x, mask})).backward();
  ExpectSameResult(pipe({x, mask}), original.forward({x, mask}).deepcopy()).backward();
  std::map<std::string, at::Tensor> want;
  for (const auto& p : original.named_parameters()) want[p.name] = p.value.grad();
  ASSERT_EQ(pipe.named_parameters().size(), want.size());
  for (const auto& [name, p] : pipe.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(torch::allclose(p.grad(), want.at(name), 1e-6, 1e-6)) << name;
  }
}

TEST(ModelInterface, NestedTuplesListsNoneAndConstants) {
  TempDir dir;
  Pipeline pipe = Compile(dir, "nested_out.pt", 3, "4x4");
  auto original = torch::jit::load(TestModel("nested_out.pt"));
  at::Tensor x = torch::randn({4, 4});
  for (bool train : {false, true}) {  // the aux output is None in eval mode, a tensor in training
    pipe.train(train);
    original.train(train);
    for (auto& p : pipe.parameters()) p.mutable_grad() = at::Tensor();
    for (auto p : original.parameters()) p.mutable_grad() = at::Tensor();
    c10::IValue got = pipe({x});
    auto leaves = FlattenWithPaths(got);
    ASSERT_EQ(leaves.size(), 6u);
    EXPECT_EQ(leaves[2].first, "out[1][1]");
    EXPECT_EQ(leaves[2].second.isNone(), !train);
    EXPECT_EQ(leaves[5].first, "out[3]");
    EXPECT_EQ(leaves[5].second.toInt(), 7);
    ExpectSameResult(original.forward({x}), original.forward({x})).backward();
    ExpectSameResult(got, original.forward({x})).backward();  // gradients from every tensor leaf
    std::map<std::string, at::Tensor> want;
    for (const auto& p : original.named_parameters()) want[p.name] = p.value.grad();
    for (const auto& [name, p] : pipe.named_parameters()) {
      EXPECT_TRUE(torch::allclose(p.grad(), want.at(name), 1e-5, 1e-6))
          << name << " train " << train;
    }
  }
}

TEST(ModelInterface, DenseBlockCutInsideKeepsEachLayersBatchNormBuffers) {
  // Regression: at --unit-depth 3 the cuts fell between the dense layers,
  // whose shared `features` list crossed stages; recomputation then saw the
  // list with later layers' features appended and bound the wrong width to
  // a batch norm ("running_mean should contain 12 elements not 8").
  TempDir dir;
  CompileOptions options =
      Options(4, 1, CheckpointMode::Always);  // one micro-batch: batch norm sees the batch
  options.unit_depth = 3;
  auto report = CompileModel(TestModel("dense_concat.pt"), dir.path("d.gpipe"), options);
  bool cut_inside = false;
  for (size_t s = 1; s < report.manifest.stages.size(); ++s) {
    cut_inside = cut_inside || report.manifest.stages[s].units.front().rfind("0.1.layer", 0) == 0;
  }
  EXPECT_TRUE(cut_inside) << "no boundary between the dense layers";
  torch::manual_seed(0);
  at::Tensor x = torch::randn({4, 3, 8, 8});
  Pipeline pipe = Pipeline::load(dir.path("d.gpipe"));
  auto want = testing::RunOriginal(TestModel("dense_concat.pt"), x, /*train=*/true, 1);
  auto got = testing::RunPipeline(pipe, x, /*train=*/true, 1);
  EXPECT_LE(testing::MaxDiff(want, got), 1e-5);
  testing::ExpectCheckpointModesBitwiseEqual(dir.path("d.gpipe"), x, 1);
}

TEST(ModelInterface, WrongShapeAtRunTimeIsOneLineNamingTheInput) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") +
                                              " --stages 3 --chunks 2 --sample-input 6x16");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  auto wrong = RunCli("gpipe-run", dir.path("m.gpipe") + " --sample-input 6x17");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_EQ(LastLine(wrong.output),
            "gpipe-run: error: input 'input' has shape [6, 17] but the model expects [N, 16] "
            "(as compiled) and fails on it; pass a tensor of shape [N, 16]\n");
  auto rank = RunCli("gpipe-run", dir.path("m.gpipe") + " --sample-input 6x16x2");
  EXPECT_EQ(LastLine(rank.output),
            "gpipe-run: error: input 'input' has shape [6, 16, 2] (3 dims) but the model expects "
            "[N, 16] (2 dims, as compiled); pass a tensor of shape [N, 16]\n");
  auto dtype = RunCli("gpipe-run", dir.path("m.gpipe") + " --sample-input 6x16:int64:9");
  EXPECT_EQ(LastLine(dtype.output),
            "gpipe-run: error: input 'input' is int64 but the model was compiled with float32 for "
            "it; pass float32 values\n");
  // Without a compile-time sample, the model's own error, without the TorchScript traceback.
  auto open = RunCli("gpipe-compile",
                     TestModel("mlp9.pt") + " -o " + dir.path("open.gpipe") + " --stages 3");
  ASSERT_EQ(open.exit_code, 0) << open.output;
  auto inside = RunCli("gpipe-run", dir.path("open.gpipe") + " --sample-input 6x17");
  // LibTorch 2.x names the kernel ("addmm: mat1 and mat2 ..."), 1.13 does not.
  EXPECT_EQ(LastLine(inside.output).rfind("gpipe-run: error: stage 0, micro-batch 0 (forward): RuntimeError: ", 0), 0u)
      << inside.output;
  EXPECT_NE(LastLine(inside.output).find("mat1 and mat2 shapes cannot be multiplied (6x17 and 16x32)\n"),
            std::string::npos)
      << inside.output;
}

TEST(ModelInterface, UnbatchedInputIsGivenWholeToEveryMicroBatch) {
  TempDir dir;
  auto run = RunCli("gpipe-compile", TestModel("feature_mask.pt") + " -o " + dir.path("t.gpipe") +
                                         " --stages 2 --chunks 2 --unbatched-inputs mask --verify"
                                         " --sample-input x=4x6,mask=8");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(" OK\n"), std::string::npos) << run.output;
  auto batched = RunCli("gpipe-compile", TestModel("feature_mask.pt") + " -o " + dir.path("u.gpipe") +
                                             " --stages 2 --chunks 2 --verify --sample-input x=4x6,mask=8");
  EXPECT_EQ(batched.exit_code, 1);
  EXPECT_NE(batched.output.find("input 'mask' has 8 rows in dim 0 but input 'x' has 4; batched inputs must "
                                "share the batch size (if 'mask' is the same for every sample, compile with "
                                "--unbatched-inputs mask)"),
            std::string::npos)
      << batched.output;
}

}  // namespace
}  // namespace gpipe
