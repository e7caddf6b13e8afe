// Faults during training, each with real processes: a process killed while
// it writes a checkpoint, a data file rewritten under a run, a disk that
// refuses the save, a NaN loss under each optimizer, and a rank killed
// mid-step under each schedule. A crash may cost the work since the last
// checkpoint, never the checkpoint; a bad file or loss is one line.

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/filesystem.hpp>
#include <cmath>
#include <fstream>
#include <limits>

#include <torch/torch.h>

#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

namespace fs = boost::filesystem;
using testing::CliPath;
using testing::RunCli;
using testing::RunShell;
using testing::TempDir;
using testing::TestModel;

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> TempFilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) names.push_back(name);
  }
  return names;
}

void ExpectSameWeights(const std::string& want_path, const std::string& got_path) {
  auto want = Pipeline::load(want_path).named_parameters();
  auto got = Pipeline::load(got_path).named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(torch::equal(want[k].second, got[k].second)) << want[k].first;
}

// big_first.pt (a classifier of 100 features) split in two, and a copy of
// its 50-example data set that a test may damage.
struct Classifier {
  TempDir dir;
  std::string artifact = dir.path("c.gpipe");
  std::string data = dir.path("data");
  std::string train = " --train --data " + data + " --batch-size 8 --optimizer adam --lr 0.01";
  Classifier() {
    auto compiled = RunCli(
        "gpipe-compile", TestModel("big_first.pt") + " -o " + artifact + " --stages 2 --chunks 2");
    EXPECT_EQ(compiled.exit_code, 0) << compiled.output;
    fs::create_directory(data);
    for (const char* name : {"inputs.npy", "targets.npy"})
      fs::copy_file(fs::path(TestModel("data_cls")) / name, fs::path(data) / name);
  }
};

TEST(Faults, AKillWhileWritingACheckpointLeavesThePreviousOneToResumeFrom) {
  Classifier c;
  const std::string ck = c.dir.path("ck.gpipe");
  auto whole =
      RunCli("gpipe-run", c.artifact + c.train + " --steps 5 --save " + c.dir.path("whole.gpipe"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  // Killed (SIGKILL) halfway through writing the checkpoint after step 2.
  auto killed = RunShell("bash -c 'GPIPE_TEST_FAILPOINT=killsave:0:2 " + CliPath("gpipe-run") +
                         " " + c.artifact + c.train + " --steps 5 --checkpoint-every 1 --save " +
                         ck + "; echo exit=$?'");
  EXPECT_OUTPUT_HAS(killed, "checkpoint: saved " + ck + " after step 1\n");
  EXPECT_OUTPUT_HAS(killed, "exit=137");
  EXPECT_EQ(killed.output.find("after step 2"), std::string::npos) << killed.output;
  ASSERT_EQ(TempFilesIn(c.dir.path("")).size(), 1u) << "the half-written file it was killed in";
  // The checkpoint of step 1 is whole, and resuming from it ends where the
  // uninterrupted run ended; the next save clears the dead writer's file.
  auto resumed = RunCli("gpipe-run", ck + c.train + " --resume --steps 5 --save " + ck);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_OUTPUT_HAS(resumed, "resuming " + ck + " after step 1\n");
  ExpectSameWeights(c.dir.path("whole.gpipe"), ck);
  EXPECT_TRUE(TempFilesIn(c.dir.path("")).empty());
}

TEST(Faults, ADataFileRewrittenUnderARunIsOneLineAndAReplacedOneIsReadAsOpened) {
  Classifier c;
  const std::string ck = c.dir.path("ck.gpipe");
  const std::string inputs = c.data + "/inputs.npy";
  const std::string original = Bytes(inputs);
  // A long run, checkpointing every step; once the first checkpoint exists
  // the inputs are truncated in place (as `cp other.npy inputs.npy` starts).
  auto run = RunShell("bash -c '" + CliPath("gpipe-run") + " " + c.artifact + c.train +
                      " --steps 1000000 --checkpoint-every 1 --save " + ck +
                      " & pid=$!; for i in $(seq 300); do [ -f " + ck +
                      " ] && break; sleep 0.1; done; truncate -s 200 " + inputs +
                      "; wait $pid; echo exit=$?'");
  EXPECT_OUTPUT_HAS(run, "gpipe-run: error: data file '" + inputs +
                             "' was rewritten while this run read it (it held " +
                             std::to_string(original.size()) +
                             " bytes when opened and now holds 200); restore it, then resume "
                             "from the last checkpoint (--resume)\nexit=1\n");
  // Restored, the last checkpoint resumes.
  std::ofstream(inputs, std::ios::binary | std::ios::trunc) << original;
  auto resumed = RunCli("gpipe-run", ck + c.train + " --resume --steps 1000 --save " + ck);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_OUTPUT_HAS(resumed, "step 1000/1000");

  // Replaced by rename (as a tool that writes a new file and moves it into
  // place does): the run keeps reading the file it opened, to the end.
  std::ofstream(c.dir.path("new.npy"), std::ios::binary) << original;
  auto replaced = RunShell("bash -c '" + CliPath("gpipe-run") + " " + c.artifact + c.train +
                           " --steps 400 --checkpoint-every 1 --save " + c.dir.path("r.gpipe") +
                           " & pid=$!; for i in $(seq 300); do [ -f " + c.dir.path("r.gpipe") +
                           " ] && break; sleep 0.1; done; mv " + c.dir.path("new.npy") + " " +
                           inputs + "; wait $pid; echo exit=$?'");
  EXPECT_OUTPUT_HAS(replaced, "step 400/400");
  EXPECT_OUTPUT_HAS(replaced, "exit=0");
}

// A file-size limit (ulimit -f) fails the write as a full disk does: the
// CLIs ignore SIGXFSZ (which would kill them silently), so the save is one
// line naming the limit and the old checkpoint stays whole.
TEST(Faults, ASaveTheDiskRefusesIsOneLineAndKeepsTheOldCheckpoint) {
  Classifier c;
  const std::string ck = c.dir.path("ck.gpipe");
  auto first = RunCli("gpipe-run", c.artifact + c.train + " --steps 2 --save " + ck);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string before = Bytes(ck);
  ASSERT_GT(before.size(), 64u * 1024) << "the limit below must cut the save short";
  auto full = RunShell("bash -c 'ulimit -f 64; " + CliPath("gpipe-run") + " " + ck + c.train +
                       " --resume --steps 4 --save " + ck + "; echo exit=$?'");
  EXPECT_OUTPUT_HAS(
      full, "gpipe-run: error: writing '" + ck + "' failed (File too large); any earlier '" + ck +
                "' is left as it was: the file-size limit (ulimit -f) is lower than the "
                "file; raise it, or write elsewhere\nexit=1\n");
  EXPECT_EQ(Bytes(ck), before);
  EXPECT_TRUE(TempFilesIn(c.dir.path("")).empty());
}

// Row 13 of the inputs is NaN: in file order with batches of 8 it is in
// step 2's mini-batch, micro-batch 1 (its rows 4-7).
// A data directory its user may not read: our line naming the file, not
// Boost's ("boost::filesystem::status: Permission denied"). Root reads
// everything, so the run drops to nobody's user id (setpriv).
TEST(Faults, AnUnreadableDataDirectoryOrArtifactNamesTheFileAndThePermission) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run as another user";
  Classifier c;
  ASSERT_EQ(RunShell("chmod 000 " + c.data).exit_code, 0);
  auto denied = RunShell("setpriv --reuid=65534 --regid=65534 --clear-groups " +
                         CliPath("gpipe-run") + " " + c.artifact + c.train + " --steps 1");
  RunShell("chmod 755 " + c.data);
  EXPECT_EQ(testing::LastLine(denied.output),
            "gpipe-run: error: cannot access '" + c.data +
                "/inputs.npy' (Permission denied); check the path and its permissions\n")
      << denied.output;

  // An artifact it may not read is not "not a gpipe artifact".
  ASSERT_EQ(RunShell("chmod 600 " + c.artifact).exit_code, 0);
  auto artifact = RunShell("setpriv --reuid=65534 --regid=65534 --clear-groups " +
                           CliPath("gpipe-inspect") + " " + c.artifact);
  EXPECT_EQ(testing::LastLine(artifact.output),
            "gpipe-inspect: error: cannot read artifact '" + c.artifact +
                "' (Permission denied); check its permissions\n")
      << artifact.output;
}

TEST(Faults, ANanLossStopsNamingTheMicroBatchOrIsSkippedWithEveryOptimizer) {
  Classifier c;
  {
    std::fstream npy(c.data + "/inputs.npy", std::ios::in | std::ios::out | std::ios::binary);
    npy.seekp(128 + 13 * 100 * 4);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int k = 0; k < 100; ++k) npy.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  }
  for (const char* optimizer : {"sgd --momentum 0.9", "adam", "adamw"}) {
    SCOPED_TRACE(optimizer);
    const std::string options = " --train --data " + c.data + " --no-shuffle --batch-size 8 " +
                                "--lr 0.01 --steps 4 --optimizer " + optimizer;
    const std::string ck = c.dir.path("ck.gpipe");
    fs::remove(ck);
    auto stopped = RunCli("gpipe-run", c.artifact + options + " --checkpoint-every 1 --save " + ck);
    EXPECT_EQ(stopped.exit_code, 1) << stopped.output;
    EXPECT_EQ(testing::LastLine(stopped.output),
              "gpipe-run: error: step 2: the loss of micro-batch 1 (rows 4-7) is NaN; the weights "
              "were not updated. Lower --lr, clip with --clip-grad-norm, skip such steps with "
              "--skip-nonfinite, or find the first stage producing NaN/Inf with "
              "--detect-anomaly\n");
    EXPECT_OUTPUT_HAS(stopped, "checkpoint: saved " + ck + " after step 1\n");
    for (const auto& [name, weight] : Pipeline::load(ck).named_parameters())
      EXPECT_TRUE(weight.isfinite().all().item<bool>()) << name;

    auto skipped = RunCli("gpipe-run", c.artifact + options + " --skip-nonfinite --save " + ck);
    EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
    EXPECT_OUTPUT_HAS(skipped,
                      "step 2/4  skipped: the loss of micro-batch 1 (rows 4-7) is NaN; the "
                      "weights were not updated (--skip-nonfinite)\n");
    EXPECT_OUTPUT_HAS(skipped, "step 4/4  epoch 1  loss ");
    for (const auto& [name, weight] : Pipeline::load(ck).named_parameters())
      EXPECT_TRUE(weight.isfinite().all().item<bool>()) << name;
  }
}

TEST(Faults, ARankKilledMidStepIsNamedByTheOthersUnderEverySchedule) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("a.gpipe") +
                                              " --stages 4 --chunks 4");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  struct Case {
    std::string options;
    int processes;
  };
  const Case cases[] = {
      {"--schedule gpipe --ranks 0,0,1,1", 2},
      {"--schedule 1f1b --checkpoint always", 4},
      {"--schedule interleaved-1f1b --virtual-stages 2 --ranks 0,1,0,1", 2},
      {"--schedule zb-h1 --checkpoint selective", 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.options);
    auto result = RunShell("GPIPE_TEST_FAILPOINT=kill:1:2 " + CliPath("gpipe-launch") +
                           " --nproc " + std::to_string(c.processes) + " " + dir.path("a.gpipe") +
                           " --sample-input 12x16 --train --steps 4 --timeout-s 60 " + c.options);
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_OUTPUT_HAS(result, "[launch] rank 1 was killed by signal 9");
    for (int rank = 0; rank < c.processes; ++rank) {
      if (rank == 1) continue;
      const std::string prefix = "[rank " + std::to_string(rank) + "] gpipe-run: error: ";
      size_t line = result.output.find(prefix);
      ASSERT_NE(line, std::string::npos) << result.output;
      const std::string message = result.output.substr(line, result.output.find('\n', line) - line);
      EXPECT_NE(message.find("lost rank "), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace gpipe
