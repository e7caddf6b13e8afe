// A schedule read from a CSV file (PyTorch's layout: one row per worker)
// trains exactly as the builder it was written from, and a plan that cannot
// run these stages and micro-batches is refused at load with one line; so is
// a micro-batch count a schedule cannot run, and a data set whose last batch
// no schedule-fitting count can split is refused before training starts.

#include <gtest/gtest.h>

#include <fstream>

#include "runtime/schedule_csv.h"
#include "runtime/trainer.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::ErrorOf;
using testing::RunCli;
using testing::TempDir;
using testing::TestModel;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<at::Tensor> Gradients(const std::string& artifact, const std::string& schedule,
                                  const at::Tensor& x) {
  PipelineOptions options;
  options.schedule = schedule;
  Pipeline pipe = Pipeline::load(artifact, options);
  at::manual_seed(3);  // dropout on: the plan's order of draws is the builder's
  pipe.train_step({x}, [](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
    return outputs[0].pow(2).sum() / static_cast<double>(rows.batch);
  });
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : pipe.named_parameters()) grads.push_back(p.grad());
  return grads;
}

TEST(ScheduleFiles, APlanTrainsBitwiseLikeTheBuilderItWasWrittenFrom) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), testing::Options(4, 4));
  at::manual_seed(0);
  const at::Tensor x = at::randn({12, 16});
  for (const std::string name : {"1f1b", "zb-h1"}) {
    const std::string plan = dir.path(name + ".csv");
    WriteFile(plan, WriteScheduleCsv(BuildSchedule(name, 4, 4)));
    const auto want = Gradients(dir.path("m.gpipe"), name, x);
    const auto got = Gradients(dir.path("m.gpipe"), plan, x);
    ASSERT_EQ(want.size(), got.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(at::equal(want[k], got[k])) << name << k;
  }
  // The command line: gpipe-run --schedule FILE.
  auto run = RunCli("gpipe-run", dir.path("m.gpipe") + " --train --steps 2 --sample-input 8x16 " +
                                     "--schedule " + dir.path("zb-h1.csv"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_OUTPUT_HAS(run, "summary: 2 steps");
}

TEST(ScheduleFiles, APlanThatCannotRunIsRefusedAtLoadWithOneLine) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), testing::Options(2, 2));
  auto load_error = [&](const std::string& text) {
    WriteFile(dir.path("plan.csv"), text);
    PipelineOptions options;
    options.schedule = dir.path("plan.csv");
    return ErrorOf([&] { Pipeline::load(dir.path("m.gpipe"), options); });
  };
  const std::string plan = dir.path("plan.csv");
  EXPECT_EQ(load_error(WriteScheduleCsv(BuildGpipe(2, 4))),
            "schedule file " + plan +
                " plans 4 micro-batches, but the pipeline splits each batch into 2; run with "
                "--chunks 4 or plan 2 micro-batches");
  EXPECT_EQ(load_error("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n"),
            plan +
                ": schedule deadlocks: worker 0 waits at 0B0 for 1B0, worker 1 waits at 1F1 "
                "for 0F1");
  // Communication is the runtime's to add, for its ranks.
  EXPECT_EQ(load_error("0F0,0SEND_F0,0F1,0B0,0B1\n1RECV_F0,1F0,1F1,1B0,1B1\n"),
            plan +
                ": action 0SEND_F0 on worker 0 moves values between ranks, but the schedule runs "
                "every stage in one process; remove it (the runtime adds SEND/RECV itself for "
                "--ranks)");
  EXPECT_EQ(
      load_error("0F0,0F1,0B1,0B0\n1F0,1F1,1X1,1B0\n"),
      "'1X1' at " + plan + ":2:3 is not an action; write STAGE F|B|I|W MICRO_BATCH, e.g. 1F0");
  PipelineOptions missing;
  missing.schedule = dir.path("absent.csv");
  EXPECT_EQ(ErrorOf([&] { Pipeline::load(dir.path("m.gpipe"), missing); }),
            "cannot read the schedule file " + dir.path("absent.csv") +
                "; give a CSV path or a schedule name");

  // A batch too small for the plan's micro-batches: the step says so.
  WriteFile(plan, WriteScheduleCsv(Build1F1B(2, 2)));
  PipelineOptions options;
  options.schedule = plan;
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
  EXPECT_EQ(ErrorOf([&] {
              pipe.train_step({at::randn({1, 16})},
                              [](const MicroBatchRows&, const std::vector<at::Tensor>& outputs) {
                                return outputs[0].sum();
                              });
            }),
            "chunks (2) is larger than the batch size (1); use --chunks 1 or fewer, or a larger "
            "batch");
}

TEST(ScheduleFiles, ALastBatchTheScheduleCannotSplitRunsAsFewerMicroBatchesOrIsRefusedFirst) {
  TempDir dir;
  CompileModel(TestModel("big_first.pt"), dir.path("m.gpipe"), testing::Options(4, 4));
  auto all = OpenDataSource(TestModel("data_cls"));
  auto train = SliceDataSource(all, 0, 39);  // 12, 12, 12 and a last batch of 3
  TrainerOptions options;
  options.batch_size = 12;
  options.loss = ParseLoss("cross_entropy");

  // interleaved-1f1b on 2 workers runs micro-batches in pairs: 3 rows run as 2.
  PipelineOptions interleaved;
  interleaved.schedule = "interleaved-1f1b";
  interleaved.virtual_stages = 2;
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), interleaved);
  Trainer trainer(pipe, train, nullptr, options);
  std::vector<StepReport> steps;
  trainer.Run([&](const StepReport& r) { steps.push_back(r); }, [](const EvalReport&) {},
              [] { return false; });
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps.back().examples, 3) << "every example trained";
  EXPECT_EQ(pipe.chunks(), 4);
  pipe.set_chunks(3);  // by hand: train_step says what the schedule needs
  EXPECT_EQ(ErrorOf([&] {
              pipe.train_step({at::randn({6, 16})},
                              [](const MicroBatchRows&, const std::vector<at::Tensor>& outputs) {
                                return outputs[0].sum();
                              });
            }),
            "interleaved-1f1b runs micro-batches in groups of the worker count (2), but got 3 "
            "micro-batches; use 2 or 4 micro-batches");

  // A plan for 4 micro-batches cannot split 3 rows: said before the first step.
  const std::string plan = dir.path("plan.csv");
  WriteFile(plan, WriteScheduleCsv(Build1F1B(4, 4)));
  PipelineOptions planned;
  planned.schedule = plan;
  Pipeline planned_pipe = Pipeline::load(dir.path("m.gpipe"), planned);
  EXPECT_EQ(ErrorOf([&] { Trainer(planned_pipe, train, nullptr, options); }),
            "the last batch of each epoch has 3 examples (39 % --batch-size 12), too few for "
            "schedule " +
                plan + ": schedule file " + plan +
                " plans 4 micro-batches, not 3; use "
                "--chunks 4 and batches of at least 4 rows; choose a --batch-size that leaves no "
                "remainder, or another schedule");
}

}  // namespace
}  // namespace gpipe
