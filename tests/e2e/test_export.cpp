// gpipe-export, the way back to PyTorch: a trained artifact becomes the
// module it was compiled from with the trained weights, and its state dict.

#include <gtest/gtest.h>

#include <map>

#include <torch/script.h>

#include "runtime/artifact.h"
#include "runtime/model_export.h"
#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::RunCli;
using testing::TempDir;
using testing::TestModel;

std::map<std::string, at::Tensor> TensorsOf(const torch::jit::Module& module) {
  std::map<std::string, at::Tensor> tensors;
  for (const auto& a : module.named_attributes(/*recurse=*/true)) {
    if (a.value.isTensor()) tensors.emplace(a.name, a.value.toTensor());
  }
  return tensors;
}

struct ExportCase {
  std::string model;
  std::string sample;  // --sample-input
  c10::IValue input;   // for the forward comparison
};

// Trained by gpipe-run (so the weights move), saved, exported: the export
// holds every tensor of the trained stages bitwise under its original name,
// training changed some, and it computes what the trained pipeline computes.
TEST(Export, TrainedModelsComeBackAsTheirSourceModuleWithTheTrainedWeights) {
  at::manual_seed(3);
  const ExportCase cases[] = {
      {"mlp9.pt", "8x16", at::randn({6, 16})},
      {"conv_bn.pt", "8x3x6x6", at::randn({6, 3, 6, 6})},     // batch norm's running statistics
      {"gpt.pt", "8x16:int64:50", at::randint(50, {6, 16})},  // embedding and head tied
  };
  for (const ExportCase& c : cases) {
    TempDir dir;
    auto compiled = RunCli("gpipe-compile", TestModel(c.model) + " -o " + dir.path("a.gpipe") +
                                                " --stages 3 --chunks 2");
    ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
    auto trained =
        RunCli("gpipe-run", dir.path("a.gpipe") + " --train --steps 2 --lr 0.05 " +
                                "--sample-input " + c.sample + " --save " + dir.path("t.gpipe"));
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    auto exported = RunCli("gpipe-export", dir.path("t.gpipe") + " -o " + dir.path("m.pt") +
                                               " --state-dict " + dir.path("w.safetensors"));
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
    EXPECT_OUTPUT_HAS(exported, "wrote " + dir.path("m.pt") + ": the source model with ");
    EXPECT_OUTPUT_HAS(exported, "wrote " + dir.path("w.safetensors") + ": state dict of ");

    Pipeline pipe = Pipeline::load(dir.path("t.gpipe"));
    torch::jit::Module model = torch::jit::load(dir.path("m.pt"));
    const auto got = TensorsOf(model);
    const auto source = TensorsOf(torch::jit::load(TestModel(c.model)));
    size_t changed = 0;
    auto stage_tensors = pipe.named_parameters();
    for (const auto& b : pipe.named_buffers()) stage_tensors.push_back(b);
    for (const auto& [name, tensor] : stage_tensors) {
      ASSERT_TRUE(got.count(name)) << c.model << " " << name;
      EXPECT_TRUE(got.at(name).equal(tensor)) << c.model << " " << name;
      changed += !source.at(name).equal(tensor);
    }
    EXPECT_GT(changed, 0u) << c.model << ": training changed no weight";
    pipe.eval();
    model.eval();
    at::Tensor want = pipe.forward({c.input})[0];
    at::Tensor out = model.forward({c.input}).toTensor();
    EXPECT_LE(testing::MaxAbsDiff(out, want), 1e-5) << c.model;
  }
}

// Python opens the export with torch.jit.load and loads both state dicts
// strictly into the nn.Module the test model was built from.
TEST(Export, PythonLoadsTheModelAndBothStateDictsIntoTheSourceModule) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile",
                   TestModel("mlp9.pt") + " -o " + dir.path("a.gpipe") + " --stages 3 --chunks 2")
                .exit_code,
            0);
  ASSERT_EQ(RunCli("gpipe-run", dir.path("a.gpipe") + " --train --steps 2 --sample-input 8x16 " +
                                    "--save " + dir.path("t.gpipe"))
                .exit_code,
            0);
  auto exported = RunCli("gpipe-export", dir.path("t.gpipe") + " -o " + dir.path("m.pt") +
                                             " --state-dict " + dir.path("w.pt"));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  ASSERT_EQ(
      RunCli("gpipe-export", dir.path("t.gpipe") + " --state-dict " + dir.path("w.safetensors"))
          .exit_code,
      0);
  auto checked = testing::RunShell(std::string(GPIPE_PYTHON) + " " + GPIPE_SOURCE_DIR +
                                   "/tests/check_export.py " + dir.path("m.pt") + " " +
                                   dir.path("w.pt") + " " + dir.path("w.safetensors"));
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_EQ(testing::LastLine(checked.output).rfind("OK torch", 0), 0u) << checked.output;
}

// A checkpoint saved by several processes keeps the source model too.
TEST(Export, ACheckpointOfSeveralProcessesExports) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile",
                   TestModel("mlp9.pt") + " -o " + dir.path("a.gpipe") + " --stages 4 --chunks 4")
                .exit_code,
            0);
  auto launched =
      RunCli("gpipe-launch", "--nproc 2 " + dir.path("a.gpipe") +
                                 " --train --steps 2 --sample-input 8x16 --ranks 0,0,1,1 " +
                                 "--save " + dir.path("t.gpipe"));
  ASSERT_EQ(launched.exit_code, 0) << launched.output;
  auto exported = RunCli("gpipe-export", dir.path("t.gpipe") + " -o " + dir.path("m.pt"));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const auto got = TensorsOf(torch::jit::load(dir.path("m.pt")));
  for (const auto& [name, tensor] : Pipeline::load(dir.path("t.gpipe")).named_parameters()) {
    EXPECT_TRUE(got.at(name).equal(tensor)) << name;
  }
}

TEST(Export, BadRequestsAreOneLineErrorsAndWriteNothing) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile",
                   TestModel("mlp9.pt") + " -o " + dir.path("a.gpipe") + " --stages 2 --chunks 2")
                .exit_code,
            0);
  auto error_of = [&](const std::string& arguments) {
    auto result = RunCli("gpipe-export", arguments);
    EXPECT_NE(result.exit_code, 0) << arguments;
    return testing::LastLine(result.output);
  };
  EXPECT_EQ(error_of(dir.path("a.gpipe")),
            "gpipe-export: nothing to write: give -o model.pt, --state-dict weights.safetensors, "
            "or both; see gpipe-export --help\n");
  EXPECT_EQ(error_of(dir.path("a.gpipe") + " -o " + dir.path("a.gpipe")),
            "gpipe-export: error: '" + dir.path("a.gpipe") +
                "' is the artifact itself; write the export elsewhere\n");
  EXPECT_EQ(error_of(dir.path("a.gpipe") + " --state-dict " + dir.path("w.npz")),
            "gpipe-export: error: state dict '" + dir.path("w.npz") +
                "' has neither the .safetensors nor the .pt extension; name it "
                "weights.safetensors (Hugging Face's safetensors) or weights.pt (torch.save)\n");
  EXPECT_EQ(error_of(dir.path("a.gpipe") + " -o " + dir.path("no/such/m.pt")),
            "gpipe-export: error: cannot write '" + dir.path("no/such/m.pt") + "': directory '" +
                dir.path("no/such") + "' does not exist\n");
  // Another model than the one compiled: named, not written.
  EXPECT_EQ(error_of(dir.path("a.gpipe") + " -o " + dir.path("m.pt") + " --model " +
                     TestModel("conv_bn.pt")),
            "gpipe-export: error: '0.weight' has shape [4, 3, 3, 3] in source model '" +
                TestModel("conv_bn.pt") +
                "' but [32, 16] in stage 0: it is not the model this artifact was compiled from; "
                "give that one with --model\n");
  EXPECT_EQ(
      error_of(dir.path("a.gpipe") + " -o " + dir.path("m.pt") + " --model " + TestModel("gpt.pt")),
      "gpipe-export: error: source model '" + TestModel("gpt.pt") +
          "' has no parameter or buffer '0.weight' that stage 0 holds: it is not the model "
          "this artifact was compiled from; give that one with --model\n");
  EXPECT_FALSE(boost::filesystem::exists(dir.path("m.pt")));

  // An artifact from before gpipe-compile kept its source model: --model supplies it.
  std::vector<ArtifactRecord> records;
  {
    ArtifactReader reader(dir.path("a.gpipe"));
    for (const auto& stage : reader.manifest().stages) {
      records.push_back({stage.file, reader.ReadRecord(stage.file)});
    }
    WriteArtifact(dir.path("old.gpipe"), reader.manifest(), records);
  }
  EXPECT_EQ(error_of(dir.path("old.gpipe") + " -o " + dir.path("m.pt")),
            "gpipe-export: error: artifact '" + dir.path("old.gpipe") +
                "' does not keep the model it was compiled from (compiled before gpipe-compile "
                "kept it); give that model with --model mlp9.pt, or compile it again\n");
  auto supplied = RunCli("gpipe-export", dir.path("old.gpipe") + " -o " + dir.path("m.pt") +
                                             " --model " + TestModel("mlp9.pt"));
  EXPECT_EQ(supplied.exit_code, 0) << supplied.output;
  EXPECT_TRUE(boost::filesystem::exists(dir.path("m.pt")));
}

}  // namespace
}  // namespace gpipe
