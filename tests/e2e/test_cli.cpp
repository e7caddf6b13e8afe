// Drives gpipe-compile and gpipe-run as a user would: the main flow, and
// every bad input of the foundation issue with its message and exit code.

#include <gtest/gtest.h>

#include <boost/filesystem.hpp>
#include <fstream>

#include <torch/torch.h>

#include "runtime/artifact.h"
#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::RunCli;
using testing::TempDir;
using testing::TestModel;

TEST(Cli, CompileVerifyTrainSaveAndRunTheTrainedArtifact) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") +
                                              " --stages 4 --chunks 4 --verify --sample-input 12x16");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  EXPECT_OUTPUT_HAS(compiled, "9 units -> 4 stages");
  EXPECT_OUTPUT_HAS(compiled, "verify: output max|diff| = ");
  EXPECT_OUTPUT_HAS(compiled, " OK\n");

  auto trained = RunCli("gpipe-run", dir.path("m.gpipe") + " --sample-input 12x16 --train --steps 3 --lr 0.05 --save " +
                                         dir.path("trained.gpipe"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_OUTPUT_HAS(trained, "step 3/3  loss ");
  EXPECT_OUTPUT_HAS(trained, "samples/s");
  EXPECT_OUTPUT_HAS(trained, "summary: 3 steps, loss ");
  EXPECT_OUTPUT_HAS(trained, "saved " + dir.path("trained.gpipe"));

  auto before = Pipeline::load(dir.path("m.gpipe")).named_parameters();
  auto after = Pipeline::load(dir.path("trained.gpipe")).named_parameters();
  ASSERT_EQ(before.size(), after.size());
  EXPECT_FALSE(torch::equal(before[0].second, after[0].second)) << "training changed nothing";

  auto inference = RunCli("gpipe-run", dir.path("trained.gpipe") + " --sample-input 12x16 --steps 2 --chunks 3");
  ASSERT_EQ(inference.exit_code, 0) << inference.output;
  EXPECT_OUTPUT_HAS(inference, "chunks 3");
  EXPECT_OUTPUT_HAS(inference, "inference");
}

TEST(Cli, NonFiniteLossStopsBeforeTheUpdate) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") + " --stages 2");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  auto run = RunCli("gpipe-run", dir.path("m.gpipe") + " --sample-input 12x16 --train --steps 5 --lr 1e30 --save " +
                                     dir.path("out.gpipe"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_OUTPUT_HAS(run, "step 1/5  loss ");
  EXPECT_OUTPUT_HAS(run, "gpipe-run: error: step 2: the loss is NaN; the weights were not updated. Lower --lr, or "
                         "find the first stage and micro-batch producing NaN/Inf with --detect-anomaly\n");
  EXPECT_FALSE(boost::filesystem::exists(dir.path("out.gpipe"))) << "diverged weights were saved";
}

TEST(Cli, HelpListsEveryOptionWithItsDefault) {
  auto compile = RunCli("gpipe-compile", "--help");
  EXPECT_EQ(compile.exit_code, 0);
  for (const char* option : {"--output", "--stages arg (=1)", "--balance", "--chunks arg (=1)",
                             "--checkpoint arg (=except_last)", "--devices", "--verify", "--sample-input"}) {
    EXPECT_OUTPUT_HAS(compile, option);
  }
  auto run = RunCli("gpipe-run", "--help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option : {"--train", "--steps arg (=10)", "--lr arg (=0.01", "--save", "--sample-input"}) {
    EXPECT_OUTPUT_HAS(run, option);
  }
}

struct BadInput {
  const char* name;
  const char* tool;
  std::string arguments;
  int exit_code;
  std::string message;
};

void PrintTo(const BadInput& bad, std::ostream* os) { *os << bad.name; }

class CliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, FailsWithAClearMessageAndWritesNothing) {
  TempDir dir;
  const BadInput& bad = GetParam();
  std::string arguments = bad.arguments;
  for (auto pos = arguments.find("OUT"); pos != std::string::npos; pos = arguments.find("OUT")) {
    arguments.replace(pos, 3, dir.path("out.gpipe"));
  }
  auto result = RunCli(bad.tool, arguments);
  EXPECT_EQ(result.exit_code, bad.exit_code) << result.output;
  EXPECT_OUTPUT_HAS(result, bad.message);
  EXPECT_EQ(result.output.find("Exception raised from"), std::string::npos) << "no C++ backtraces for users";
  EXPECT_FALSE(boost::filesystem::exists(dir.path("out.gpipe")));
  EXPECT_TRUE(boost::filesystem::is_empty(dir.path(""))) << "a temporary file was left behind";
}

const std::string kMlp = TestModel("mlp9.pt");

INSTANTIATE_TEST_SUITE_P(
    Foundation, CliBadInput,
    ::testing::Values(
        BadInput{"BalanceSum", "gpipe-compile", kMlp + " -o OUT --balance 3,3,2", 1,
                 "gpipe-compile: error: --balance sums to 8 but the model has 9 units (top-level "
                 "submodules); make it sum to 9 or use --stages N"},
        BadInput{"BalanceZero", "gpipe-compile", kMlp + " -o OUT --balance 4,0,5", 1,
                 "--balance gives stage 1 0 units; every stage needs at least 1"},
        BadInput{
            "TooManyStages", "gpipe-compile", kMlp + " -o OUT --stages 10", 1,
            "--stages 10 asks for more stages than the model has units: 9 (0, 1, 2, 3, 4, 5, 6, 7, "
            "8), the submodule calls that cuts can fall between; use --stages 9 or fewer"},
        BadInput{"MissingModel", "gpipe-compile", TestModel("nope.pt") + " -o OUT", 1,
                 "nope.pt' does not exist; export one with torch.jit.script(model).save("},
        BadInput{"CorruptModel", "gpipe-compile", TestModel("not_a_model.pt") + " -o OUT", 1,
                 "not_a_model.pt' as a TorchScript model"},
        BadInput{"TruncatedModel", "gpipe-compile", TestModel("truncated.pt") + " -o OUT", 1,
                 "truncated.pt' as a TorchScript model"},
        BadInput{"BadCheckpoint", "gpipe-compile", kMlp + " -o OUT --checkpoint sometimes", 1,
                 "unknown checkpoint mode 'sometimes'; use one of: always, budget, except_last, "
                 "never, selective"},
        BadInput{"DeviceCount", "gpipe-compile", kMlp + " -o OUT --stages 2 --devices cpu", 1,
                 "--devices lists 1 devices but there are 2 stages"},
        BadInput{"NoCuda", "gpipe-compile", kMlp + " -o OUT --stages 2 --devices cpu,cuda:3", 1,
                 "device 'cuda:3'"},
        BadInput{"VerifyNeedsInput", "gpipe-compile", kMlp + " -o OUT --verify", 2,
                 "--verify needs --sample-input; see gpipe-compile --help"},
        BadInput{"UnknownOption", "gpipe-compile", kMlp + " -o OUT --stagez 2", 2,
                 "unrecognised option '--stagez'"},
        BadInput{"MissingArtifact", "gpipe-run", TestModel("nope.gpipe") + " --sample-input 4x16",
                 1, "nope.gpipe' does not exist; create it with gpipe-compile"},
        BadInput{"ModelIsNotArtifact", "gpipe-run", kMlp + " --sample-input 4x16", 1,
                 "has no manifest.json, so it is not a gpipe artifact"},
        BadInput{"TextIsNotArtifact", "gpipe-run",
                 TestModel("not_a_model.pt") + " --sample-input 4x16", 1,
                 "is not a gpipe artifact (not a readable zip archive"},
        BadInput{"BadShape", "gpipe-run", kMlp + " --sample-input 4xk", 1,
                 "input spec '4xk': dimension 'k' is not a positive integer"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return std::string(info.param.name); });

TEST(Cli, ChunksLargerThanBatchIsAClearError) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile", kMlp + " -o " + dir.path("m.gpipe") + " --stages 2").exit_code, 0);
  auto result = RunCli("gpipe-run", dir.path("m.gpipe") + " --sample-input 4x16 --chunks 8 --train --steps 1");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_OUTPUT_HAS(result, "gpipe-run: error: chunks (8) is larger than the batch size (4); use --chunks 4 or fewer");
}

TEST(Cli, WrongInputWidthNamesTheStage) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile", kMlp + " -o " + dir.path("m.gpipe") + " --stages 2").exit_code, 0);
  auto result = RunCli("gpipe-run", dir.path("m.gpipe") + " --sample-input 4x17 --steps 1");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_OUTPUT_HAS(result, "stage 0, micro-batch 0 (forward)");
}

TEST(Artifact, FailureBetweenWriteAndRenameKeepsThePreviousFile) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile", kMlp + " -o " + dir.path("m.gpipe") + " --stages 2").exit_code, 0);
  std::ifstream in(dir.path("m.gpipe"), std::ios::binary);
  std::string before((std::istreambuf_iterator<char>(in)), {});
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"));
  SetArtifactWriteFailpointForTesting(ArtifactWriteFailpoint::kThrowBeforeRename);
  EXPECT_THROW(pipe.save(dir.path("m.gpipe")), c10::Error);
  SetArtifactWriteFailpointForTesting(ArtifactWriteFailpoint::kNone);
  std::ifstream again(dir.path("m.gpipe"), std::ios::binary);
  std::string after((std::istreambuf_iterator<char>(again)), {});
  EXPECT_EQ(before, after);
  size_t files = 0;
  for (const auto& entry : boost::filesystem::directory_iterator(dir.path("")))
    files += boost::filesystem::is_regular_file(entry.status());
  EXPECT_EQ(files, 1u) << "the temporary file must be removed";
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(Cli, InspectShowsTheUNetSkipRoutesWithShapes) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile", TestModel("unet.pt") + " -o " + dir.path("u.gpipe") + " --stages 3").exit_code, 0);
  auto result = RunCli("gpipe-inspect", dir.path("u.gpipe") + " --sample-input 2x3x16x16");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_OUTPUT_HAS(result, "3 stages");
  EXPECT_OUTPUT_HAS(result, "stage 1  device cpu");
  EXPECT_OUTPUT_HAS(result, "skip routes");
  EXPECT_OUTPUT_HAS(result, "stage 0 out 1 -> stage 2 in 1 [2, 8, 8, 8]");
  EXPECT_OUTPUT_HAS(result, "stage 0 out 2 -> stage 2 in 2 [2, 4, 16, 16]");
  // Each stage's selective checkpointing plan: its convolutions kept.
  EXPECT_OUTPUT_HAS(result, "  selective: keeps ");
  EXPECT_OUTPUT_HAS(result, " convolution, recomputes ");
}

// --activation-budget: the compile prints each stage's plan, gpipe-inspect its
// prediction, gpipe-run runs it and refuses selective on it with the fix.
TEST(Cli, AnActivationBudgetIsPlannedShownAndRun) {
  TempDir dir;
  const std::string art = dir.path("g.gpipe");
  auto refused =
      RunCli("gpipe-compile", TestModel("gpt.pt") + " -o " + art + " --activation-budget 1");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_OUTPUT_HAS(refused,
                    "gpipe-compile: --activation-budget needs --sample-input: what each stage "
                    "keeps is measured on the sample; see gpipe-compile --help");
  // A whole-stage mode given too would run instead of the budget's plan: refused.
  auto never = RunCli("gpipe-compile", TestModel("gpt.pt") + " -o " + art +
                                           " --activation-budget 1 --checkpoint never "
                                           "--sample-input 8x16:int64:50");
  EXPECT_EQ(never.exit_code, 2) << never.output;
  EXPECT_OUTPUT_HAS(never,
                    "gpipe-compile: --activation-budget plans what --checkpoint budget recomputes, "
                    "but --checkpoint never was given too and would run instead; drop --checkpoint "
                    "(budget is the default with --activation-budget) or drop --activation-budget; "
                    "see gpipe-compile --help");
  EXPECT_FALSE(boost::filesystem::exists(art));
  auto compiled = RunCli("gpipe-compile", TestModel("gpt.pt") + " -o " + art +
                                              " --stages 2 --chunks 2 --activation-budget 0.5 "
                                              "--sample-input 8x16:int64:50");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  EXPECT_OUTPUT_HAS(compiled, "checkpoint budget");
  EXPECT_OUTPUT_HAS(compiled,
                    "activation budget 0.5 MiB per stage and micro-batch: stage 0 keeps ");
  auto inspected = RunCli("gpipe-inspect", art);
  EXPECT_OUTPUT_HAS(inspected, "  budget: keeps ");
  EXPECT_OUTPUT_HAS(inspected, " per micro-batch with outputs, ");
  auto ran =
      RunCli("gpipe-run", art + " --train --steps 2 --sample-input 8x16:int64:50 --loss sum");
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  auto selective = RunCli(
      "gpipe-run", art + " --train --steps 1 --sample-input 8x16:int64:50 --checkpoint selective");
  EXPECT_EQ(selective.exit_code, 1);
  EXPECT_OUTPUT_HAS(selective,
                    "gpipe-run: error: '" + art +
                        "' was compiled with --activation-budget 0.5 MiB, so its recompute plan "
                        "is the budget's; use checkpoint mode budget, or compile without "
                        "--activation-budget for selective");
}

TEST(Cli, InspectPrintsAScheduleTableAndRefusesOneThatDoesNotFit) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile", kMlp + " -o " + dir.path("m.gpipe") + " --stages 4 --chunks 8")
                .exit_code,
            0);
  auto table = RunCli("gpipe-inspect", dir.path("m.gpipe") + " --schedule 1f1b");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_OUTPUT_HAS(table, "1f1b: 4 stages, 8 micro-batches, 4 workers");
  EXPECT_OUTPUT_HAS(table, "worker 3 .   .   .   3F0 3B0 3F1 3B1");
  EXPECT_OUTPUT_HAS(table, "bubble fraction 0.273; peak in-flight per worker: 4 3 2 1");
  auto interleaved = RunCli(
      "gpipe-inspect", dir.path("m.gpipe") + " --schedule interleaved-1f1b --virtual-stages 3");
  EXPECT_EQ(interleaved.exit_code, 1);
  EXPECT_OUTPUT_HAS(interleaved, "virtual");
  auto unknown = RunCli("gpipe-inspect", dir.path("m.gpipe") + " --schedule 2f2b");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_OUTPUT_HAS(unknown, "unknown schedule '2f2b'");
  // On two ranks: stage 1 sends to stage 2 and gets its gradient back.
  auto ranked = RunCli("gpipe-inspect",
                       dir.path("m.gpipe") + " --schedule gpipe --micro-batches 2 --ranks 0,0,1,1");
  ASSERT_EQ(ranked.exit_code, 0) << ranked.output;
  EXPECT_OUTPUT_HAS(ranked, "worker 1 .        1F0      1SEND_F0 1F1      1SEND_F1");
  EXPECT_OUTPUT_HAS(ranked, "worker 2 .        .        .        2RECV_F0 2F0      2RECV_F1");
  EXPECT_OUTPUT_HAS(ranked, "peak in-flight per worker: 2 2 2 2");
  auto wrong_count = RunCli("gpipe-inspect", dir.path("m.gpipe") + " --schedule 1f1b --ranks 0,1");
  EXPECT_EQ(wrong_count.exit_code, 1);
  EXPECT_OUTPUT_HAS(wrong_count,
                    "--ranks lists 2 ranks but the artifact has 4 stages; give one rank per stage");
  auto alone = RunCli("gpipe-inspect", dir.path("m.gpipe") + " --ranks 0,0,1,1");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_OUTPUT_HAS(alone, "--ranks needs --schedule");
}

TEST(Cli, SplitBeforeAnUnknownNameListsTheValidOnes) {
  TempDir dir;
  auto result = RunCli("gpipe-compile", TestModel("resnet50.pt") + " -o " + dir.path("r.gpipe") +
                                            " --split-before layer2.0,layer9");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_OUTPUT_HAS(result, "--split-before: the model has no submodule 'layer9'");
  EXPECT_OUTPUT_HAS(result, "valid names: conv1, bn1, relu, maxpool, layer1, layer1.0, layer1.0.conv1");
  EXPECT_FALSE(boost::filesystem::exists(dir.path("r.gpipe")));
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST(Cli, SigintFinishesTheStepSavesAndExits130) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile", kMlp + " -o " + dir.path("m.gpipe") + " --stages 2 --chunks 2").exit_code, 0);
  const std::string out = dir.path("trained.gpipe");
  // Start a long run that checkpoints every step; interrupt it once the first
  // checkpoint exists (waiting at most 30 s), and report its exit code.
  std::string script = "bash -c '" + testing::CliPath("gpipe-run") + " " + dir.path("m.gpipe") +
                       " --sample-input 8x16 --train --steps 1000000 --checkpoint-every 1 --save " + out +
                       " & pid=$!; for i in $(seq 300); do [ -f " + out +
                       " ] && break; sleep 0.1; done; kill -INT $pid; wait $pid; echo exit=$?'";
  auto result = testing::RunShell(script);
  EXPECT_OUTPUT_HAS(result, "checkpoint: saved " + out + " after step 1");
  EXPECT_OUTPUT_HAS(result, "interrupted after step");
  EXPECT_OUTPUT_HAS(result, "saved " + out + "\n");
  EXPECT_OUTPUT_HAS(result, "exit=130");
  Pipeline trained = Pipeline::load(out);  // the saved state is a whole artifact
  EXPECT_EQ(trained.num_stages(), 2u);
  for (const auto& entry : boost::filesystem::directory_iterator(dir.path(""))) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST(Cli, CheckpointEveryNeedsSave) {
  auto result = RunCli("gpipe-run", kMlp + " --sample-input 4x16 --train --checkpoint-every 2");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_OUTPUT_HAS(result, "--checkpoint-every needs --save OUT");
}

}  // namespace
}  // namespace gpipe
