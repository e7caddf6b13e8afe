// Nothing lost to a signal or an output path: SIGTERM and SIGHUP stop a
// training run as Ctrl-C does (finish the step, save, exit 128 + signal),
// the launcher passes them on and its ranks do not outlive it, and output
// paths are checked before the run, not after it.

#include <gtest/gtest.h>

#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::CliPath;
using testing::RunCli;
using testing::RunShell;
using testing::TempDir;
using testing::TestModel;

// Starts `command` in the background, waits (at most 60 s) until `ready`
// exists, sends `signal` to it and reports its exit code as "exit=N".
std::string SignalWhenReady(const std::string& command, const std::string& ready,
                            const std::string& signal) {
  return "bash -c '" + command + " & pid=$!; for i in $(seq 600); do [ -f " + ready +
         " ] && break; sleep 0.1; done; kill -" + signal + " $pid; wait $pid; echo exit=$?'";
}

TEST(Signals, SigtermAndSighupFinishTheStepSaveAndExitAsTheShellReportsThem) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile",
                   TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") + " --stages 2 --chunks 2")
                .exit_code,
            0);
  for (const auto& [signal, code] :
       {std::pair<std::string, std::string>{"TERM", "143"}, {"HUP", "129"}}) {
    const std::string out = dir.path(signal + ".gpipe");
    auto result = RunShell(SignalWhenReady(
        CliPath("gpipe-run") + " " + dir.path("m.gpipe") +
            " --sample-input 8x16 --train --steps 1000000 --checkpoint-every 1 --save " + out,
        out, signal));
    EXPECT_OUTPUT_HAS(result, "interrupted after step");
    EXPECT_OUTPUT_HAS(result, "(SIG" + signal + ")\n");
    EXPECT_OUTPUT_HAS(result, "saved " + out + "\n");
    EXPECT_OUTPUT_HAS(result, "exit=" + code);
    EXPECT_EQ(Pipeline::load(out).num_stages(), 2u);
  }
}

// Training on data names the step it stopped after and the step the whole
// run would have ended at (the "step k/N" lines' N).
TEST(Signals, ADataRunStoppedBySigtermSavesAndNamesItsStepOfTheWhole) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile", TestModel("big_first.pt") + " -o " + dir.path("c.gpipe") +
                                        " --stages 2 --chunks 2")
                .exit_code,
            0);
  const std::string out = dir.path("d.gpipe");
  auto result = RunShell(
      SignalWhenReady(CliPath("gpipe-run") + " " + dir.path("c.gpipe") + " --train --data " +
                          TestModel("data_cls") +
                          " --batch-size 8 --epochs 100000 --checkpoint-every 1 --save " + out,
                      out, "TERM"));
  const size_t at = result.output.find("step 1/");
  ASSERT_NE(at, std::string::npos) << result.output;
  const std::string total = result.output.substr(at + 7, result.output.find(' ', at + 7) - at - 7);
  EXPECT_OUTPUT_HAS(result, "interrupted after step ");
  EXPECT_OUTPUT_HAS(result, " of " + total + " (SIGTERM)\n");
  EXPECT_OUTPUT_HAS(result, "exit=143");
  EXPECT_EQ(Pipeline::load(out).num_stages(), 2u);
}

// SIGTERM to the launcher reaches every rank, which saves one checkpoint
// together; SIGKILL cannot be passed on, and the ranks stop by themselves.
TEST(Signals, TheLauncherPassesSigtermOnAndItsRanksDoNotOutliveIt) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile",
                   TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") + " --stages 2 --chunks 2")
                .exit_code,
            0);
  const std::string out = dir.path("t.gpipe");
  const std::string launch =
      CliPath("gpipe-launch") + " --nproc 2 " + dir.path("m.gpipe") +
      " --sample-input 8x16 --train --steps 1000000 --checkpoint-every 1 --save ";
  auto termed = RunShell(SignalWhenReady(launch + out, out, "TERM"));
  EXPECT_OUTPUT_HAS(termed, "[rank 0] interrupted after step");  // rank 0 speaks for all
  EXPECT_OUTPUT_HAS(termed, "(SIGTERM)");
  EXPECT_OUTPUT_HAS(termed, "[rank 0] saved " + out + "\n");
  EXPECT_OUTPUT_HAS(termed, "exit=143");
  EXPECT_EQ(Pipeline::load(out).num_stages(), 2u);

  // Killed outright: no rank of this run may be left (each gets SIGTERM from
  // the kernel). "[g]" keeps the pattern from matching this shell's own command line.
  const std::string killed_out = dir.path("k.gpipe");
  const std::string ranks = "pgrep -f \"[g]pipe-run " + dir.path("m.gpipe") + "\" >/dev/null";
  auto killed = RunShell(SignalWhenReady(launch + killed_out, killed_out, "KILL") +
                         "; for i in $(seq 300); do " + ranks + " || break; sleep 0.1; done; " +
                         ranks + " && echo ranks-left || echo no-ranks-left");
  EXPECT_OUTPUT_HAS(killed, "exit=137");
  EXPECT_OUTPUT_HAS(killed, "no-ranks-left");
}

// Checked before the first step: nothing is trained for nothing.
TEST(OutputPaths, AnOutputThatCannotBeWrittenIsRefusedBeforeTheRun) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile",
                   TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") + " --stages 2 --chunks 2")
                .exit_code,
            0);
  const std::string run = dir.path("m.gpipe") + " --sample-input 8x16 --train --steps 3 ";
  auto missing = RunCli("gpipe-run", run + "--save " + dir.path("no/such/t.gpipe"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(testing::LastLine(missing.output), "gpipe-run: error: cannot write --save '" +
                                                   dir.path("no/such/t.gpipe") + "': directory '" +
                                                   dir.path("no/such") + "' does not exist\n");
  EXPECT_EQ(missing.output.find("step 1"), std::string::npos) << missing.output;

  auto directory = RunCli("gpipe-run", run + "--save " + dir.path(""));
  EXPECT_EQ(directory.exit_code, 1);
  EXPECT_OUTPUT_HAS(directory, "--save '" + dir.path("") +
                                   "' is a directory; give a file name such as model.gpipe");

  // A device, a pipe or a symbolic link would be replaced by the rename.
  ASSERT_EQ(RunShell("mkfifo " + dir.path("fifo") + " && ln -s " + dir.path("m.gpipe") + " " +
                     dir.path("link.gpipe"))
                .exit_code,
            0);
  for (const std::string& path :
       {std::string("/dev/null"), dir.path("fifo"), dir.path("link.gpipe")}) {
    auto refused = RunCli("gpipe-run", run + "--save " + path);
    EXPECT_EQ(refused.exit_code, 1) << path;
    EXPECT_EQ(testing::LastLine(refused.output),
              "gpipe-run: error: --save '" + path +
                  "' exists and is not a regular file (a device, pipe, socket or symbolic link), "
                  "which writing would replace; give the name of a regular file, such as "
                  "model.gpipe\n");
  }
  EXPECT_TRUE(boost::filesystem::is_symlink(dir.path("link.gpipe")));

  auto trace = RunCli("gpipe-run", run + "--trace " + dir.path("no/such/trace.json"));
  EXPECT_EQ(trace.exit_code, 1);
  EXPECT_OUTPUT_HAS(trace, "cannot write --trace '" + dir.path("no/such/trace.json") + "'");
  EXPECT_EQ(trace.output.find("step 1"), std::string::npos) << trace.output;

  // The metrics file too: checked before the data is even opened.
  auto metrics = RunCli("gpipe-run", dir.path("m.gpipe") + " --train --data " + dir.path("d") +
                                         " --metrics-out " + dir.path("no/such/m.jsonl"));
  EXPECT_EQ(metrics.exit_code, 1);
  EXPECT_EQ(testing::LastLine(metrics.output), "gpipe-run: error: cannot write --metrics-out '" +
                                                   dir.path("no/such/m.jsonl") + "': directory '" +
                                                   dir.path("no/such") + "' does not exist\n");
}

TEST(OutputPaths, OptionsThatWouldDoNothingAreRefused) {
  TempDir dir;
  ASSERT_EQ(RunCli("gpipe-compile",
                   TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") + " --stages 2 --chunks 2")
                .exit_code,
            0);
  auto schedule =
      RunCli("gpipe-run", dir.path("m.gpipe") + " --sample-input 8x16 --schedule zb-h1");
  EXPECT_EQ(schedule.exit_code, 2);
  EXPECT_EQ(
      testing::LastLine(schedule.output),
      "gpipe-run: --schedule orders training's work; it needs --train; see gpipe-run --help\n");
  auto trace = RunCli("gpipe-run", dir.path("m.gpipe") + " --train --data " + dir.path("d") +
                                       " --trace " + dir.path("t.json"));
  EXPECT_EQ(trace.exit_code, 2);
  EXPECT_EQ(testing::LastLine(trace.output),
            "gpipe-run: --trace records runs on --sample-input; training on --data writes no "
            "trace, so drop it; see gpipe-run --help\n");
}

}  // namespace
}  // namespace gpipe
