// Every schedule (gpipe, 1f1b, interleaved-1f1b, zb-h1) run by the executor
// from its action list: the gradients of the unpipelined model in every
// checkpoint mode, on a plain MLP, on skip routes (U-Net) and on tied weights
// (GPT); the activation memory each schedule holds; and the order of the
// tasks the trace records. With dropout: test_schedules_dropout.cpp.

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include <torch/script.h>

#include "runtime/memory_tracker.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/e2e/schedule_cases.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::kSchedules;
using testing::ScheduleCase;
using testing::SquaresShare;
using testing::TempDir;
using testing::TestModel;

void ExpectEveryScheduleGivesTheOriginalsGradients(const std::string& model,
                                                   const at::Tensor& input) {
  auto original = torch::jit::load(TestModel(model));
  original.eval();  // no dropout: every schedule computes the same function
  at::Tensor whole = SquaresShare(original.forward({input}).toTensor(), input.size(0));
  whole.backward();
  std::map<std::string, at::Tensor> want;
  for (const auto& p : original.named_parameters()) want[p.name] = p.value.grad();

  TempDir dir;
  CompileModel(TestModel(model), dir.path("m.gpipe"), testing::Options(4, 4));
  for (const ScheduleCase& c : kSchedules) {
    for (CheckpointMode mode : {CheckpointMode::Never, CheckpointMode::ExceptLast,
                                CheckpointMode::Always, CheckpointMode::Selective}) {
      PipelineOptions options;
      options.schedule = c.schedule;
      options.virtual_stages = c.virtual_stages;
      options.checkpoint = mode;
      Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
      pipe.eval();
      const double loss = pipe.train_step(
          {input}, [&](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
            return SquaresShare(outputs[0], rows.batch);
          });
      const std::string label = model + " " + c.schedule + " " + ToString(mode);
      EXPECT_NEAR(loss, whole.item<double>(), 1e-5 * std::max(1.0, std::abs(whole.item<double>())))
          << label;
      for (const auto& [name, p] : pipe.named_parameters()) {
        ASSERT_TRUE(p.grad().defined()) << label << " " << name;
        EXPECT_LE(testing::ScaledDiff(p.grad(), want.at(name)), 1e-5) << label << " " << name;
      }
    }
  }
}

TEST(Schedules, EveryScheduleAndCheckpointModeGivesTheOriginalsGradientsOnAnMlp) {
  at::manual_seed(0);
  ExpectEveryScheduleGivesTheOriginalsGradients("mlp9.pt", at::randn({12, 16}));
}

TEST(Schedules, EveryScheduleCarriesSkipRoutes) {
  at::manual_seed(1);
  ExpectEveryScheduleGivesTheOriginalsGradients("unet.pt", at::randn({4, 3, 16, 16}));
}

TEST(Schedules, EveryScheduleTrainsTiedWeightsAsOne) {
  at::manual_seed(2);
  ExpectEveryScheduleGivesTheOriginalsGradients("gpt.pt", at::randint(50, {8, 8}, at::kLong));
}

// Batch norm in training, deferred or not: whatever the order of forwards,
// backwards and recomputes, every schedule ends with GPipe's buffers and
// gradients (train mode, so each micro-batch normalises with its own
// statistics). Deferred, the running statistics are folded in once from all
// micro-batches; not deferred, each forward updates them in micro-batch
// order and a recompute leaves them alone. except_last keeps micro-batch
// 0's graph, which saved the running statistics, across the other
// micro-batches' recomputes when its W waits (zb-h1): they must not write
// the buffers it saved.
TEST(Schedules, BatchNormEndsWithGpipesStatisticsInEveryScheduleAndCheckpointMode) {
  at::manual_seed(4);
  at::Tensor x = at::randn({8, 3, 6, 6}) * 3 + 1;
  TempDir dir;
  for (bool deferred : {true, false})
    for (CheckpointMode mode : {CheckpointMode::Never, CheckpointMode::ExceptLast,
                                CheckpointMode::Always, CheckpointMode::Selective}) {
      SCOPED_TRACE(deferred ? "deferred batch norm" : "batch norm");
      CompileOptions compile = testing::Options(2, 4, mode);
      compile.deferred_batch_norm = deferred;
      CompileModel(TestModel("conv_bn.pt"), dir.path("bn.gpipe"), compile);
      std::map<std::string, at::Tensor> gpipe_state;
      for (const ScheduleCase& c : kSchedules) {
        PipelineOptions options;
        options.schedule = c.schedule;
        options.virtual_stages = c.virtual_stages;
        Pipeline pipe = Pipeline::load(dir.path("bn.gpipe"), options);
        pipe.train_step({x},
                        [&](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
                          return SquaresShare(outputs[0], rows.batch);
                        });
        std::map<std::string, at::Tensor> state;
        for (const auto& [name, b] : pipe.named_buffers()) state[name] = b.clone();
        for (const auto& [name, p] : pipe.named_parameters())
          state[name + ".grad"] = p.grad().clone();
        EXPECT_EQ(state.at("1.num_batches_tracked").item<int64_t>(), deferred ? 1 : 4)
            << c.schedule;
        if (c.schedule == "gpipe") {
          gpipe_state = state;
          continue;
        }
        for (const auto& [name, t] : state) {
          if (!at::isFloatingType(t.scalar_type())) continue;
          EXPECT_LE(testing::ScaledDiff(t, gpipe_state.at(name)), 1e-6)
              << c.schedule << " " << ToString(mode) << " " << name;
        }
      }
    }
}

// The trace shows each schedule's order: zb-h1 splits every backward into I
// and W with W after its I, recomputation happens exactly in the
// checkpointed modes, and the loss of a micro-batch lets 1F1B start a
// backward before the last forward.
TEST(Schedules, TheTraceShowsEachSchedulesTasksInOrder) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), testing::Options(4, 8));
  at::Tensor x = at::randn({16, 16});
  auto trace_of = [&](const std::string& schedule, CheckpointMode mode) {
    PipelineOptions options;
    options.schedule = schedule;
    options.checkpoint = mode;
    Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
    pipe.set_tracing(true);
    pipe.train_step({x}, [&](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
      return SquaresShare(outputs[0], rows.batch);
    });
    return pipe.take_trace();
  };
  using Phase = TaskRecord::Phase;
  auto count = [](const std::vector<TaskRecord>& trace, Phase phase) {
    size_t n = 0;
    for (const auto& r : trace) n += r.phase == phase;
    return n;
  };
  auto zb = trace_of("zb-h1", CheckpointMode::Never);
  EXPECT_EQ(count(zb, Phase::Backward), 0u);
  EXPECT_EQ(count(zb, Phase::BackwardInput), 32u);
  EXPECT_EQ(count(zb, Phase::BackwardWeight), 32u);
  std::map<std::pair<size_t, size_t>, int64_t> input_end;
  for (const auto& r : zb) {
    if (r.phase == Phase::BackwardInput) input_end[{r.stage, r.micro_batch}] = r.end_ns;
  }
  for (const auto& r : zb) {
    if (r.phase == Phase::BackwardWeight) {
      EXPECT_GE(r.start_ns, input_end.at({r.stage, r.micro_batch}))
          << "W before I at stage " << r.stage;
    }
  }
  EXPECT_EQ(count(trace_of("1f1b", CheckpointMode::Never), Phase::Recompute), 0u);
  EXPECT_EQ(count(trace_of("1f1b", CheckpointMode::Always), Phase::Recompute), 32u);
  EXPECT_EQ(count(trace_of("gpipe", CheckpointMode::ExceptLast), Phase::Recompute), 28u);

  auto one_f_one_b = trace_of("1f1b", CheckpointMode::Never);
  int64_t first_backward = INT64_MAX, last_forward = 0;
  for (const auto& r : one_f_one_b) {
    if (r.stage != 0) continue;
    if (r.phase == Phase::Backward) first_backward = std::min(first_backward, r.start_ns);
    if (r.phase == Phase::Forward) last_forward = std::max(last_forward, r.end_ns);
  }
  EXPECT_LT(first_backward, last_forward) << "stage 0 ran every forward before its first backward";
}

// 1F1B keeps at most S micro-batches' activations per stage where GPipe
// keeps all M: at S = 4, M = 16 the first stage's peak is a quarter or so.
TEST(Schedules, OneFOneBHoldsAtMostHalfOfGpipesActivations) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"),
               testing::Options(4, 16, CheckpointMode::Never));
  MemoryTracker::Enable();
  at::Tensor x = at::randn({256, 16});
  auto peak = [&](const std::string& schedule) {
    PipelineOptions options;
    options.schedule = schedule;
    Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
    auto step = [&] {
      pipe.train_step({x}, [&](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
        return SquaresShare(outputs[0], rows.batch);
      });
    };
    step();  // parameter gradients exist from here on
    MemoryTracker::ResetPeaks();
    step();
    return MemoryTracker::PeakBytes(4)[0];
  };
  const int64_t gpipe = peak("gpipe");
  const int64_t one_f_one_b = peak("1f1b");
  EXPECT_GT(gpipe, 0);
  std::printf("stage 0 activation peak, S=4 M=16: gpipe %lld bytes, 1f1b %lld bytes (%.2f)\n",
              static_cast<long long>(gpipe), static_cast<long long>(one_f_one_b),
              static_cast<double>(one_f_one_b) / static_cast<double>(gpipe));
  EXPECT_LE(2 * one_f_one_b, gpipe) << "1f1b " << one_f_one_b << " bytes, gpipe " << gpipe;
}

TEST(Schedules, UnknownOrUnfitSchedulesAndWholeBatchLossesAreOneLineErrors) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), testing::Options(3, 4));
  auto load_error = [&](const std::string& schedule, size_t virtual_stages) {
    PipelineOptions options;
    options.schedule = schedule;
    options.virtual_stages = virtual_stages;
    return testing::ErrorOf([&] { Pipeline::load(dir.path("m.gpipe"), options); });
  };
  EXPECT_EQ(load_error("2f2b", 1),
            "unknown schedule '2f2b'; use gpipe, 1f1b, interleaved-1f1b or zb-h1");
  EXPECT_EQ(load_error("interleaved-1f1b", 2),
            "interleaved-1f1b needs the stage count (3) to be a multiple of the virtual stages per "
            "worker "
            "(2); use 2 or 4 stages");
  PipelineOptions options;
  options.schedule = "1f1b";
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
  at::Tensor x = at::randn({8, 16});
  EXPECT_EQ(testing::ErrorOf([&] {
              pipe.train_step(
                  {x}, [](const std::vector<at::Tensor>& outputs) { return outputs[0].sum(); });
            }),
            "schedule '1f1b' runs each micro-batch's backward before the others' forward, so it "
            "needs the "
            "loss per micro-batch: call train_step with a MicroBatchLossFunction (see LossShares), "
            "or use "
            "gpipe");
  EXPECT_EQ(
      testing::ErrorOf([&] { pipe.forward({x})[0].sum().backward(); }),
      "this pipeline trains with schedule '1f1b', which runs each micro-batch's backward amid the "
      "others' forwards: train it with train_step(inputs, a loss per micro-batch); forward() then "
      "backward() runs gpipe only");
}

// The command line: gpipe-compile keeps the schedule in the artifact and
// --verify trains through it; gpipe-run uses it, or the one it is given.
TEST(Schedules, CompileKeepsTheScheduleVerifiesWithItAndRunOverridesIt) {
  TempDir dir;
  const std::string model = TestModel("mlp9.pt");
  auto compiled =
      testing::RunCli("gpipe-compile", model + " -o " + dir.path("m.gpipe") +
                                           " --stages 4 --chunks 4 --schedule zb-h1 --verify "
                                           "--sample-input 8x16");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  EXPECT_NE(compiled.output.find("verify: "), std::string::npos) << compiled.output;
  EXPECT_NE(compiled.output.find(" OK"), std::string::npos) << compiled.output;
  EXPECT_EQ(Pipeline::load(dir.path("m.gpipe")).schedule(), "zb-h1");
  for (const char* schedule :
       {"", " --schedule 1f1b", " --schedule interleaved-1f1b --virtual-stages 2"}) {
    auto run = testing::RunCli(
        "gpipe-run", dir.path("m.gpipe") + " --train --steps 2 --sample-input 8x16" + schedule);
    EXPECT_EQ(run.exit_code, 0) << schedule << ": " << run.output;
    EXPECT_NE(run.output.find("summary: 2 steps"), std::string::npos) << run.output;
  }
  auto unfit = testing::RunCli("gpipe-compile",
                               model + " -o " + dir.path("u.gpipe") +
                                   " --stages 3 --schedule interleaved-1f1b --virtual-stages 2");
  EXPECT_EQ(unfit.exit_code, 1);
  EXPECT_OUTPUT_HAS(
      unfit,
      "gpipe-compile: error: interleaved-1f1b needs the stage count (3) to be a multiple of the "
      "virtual stages per worker (2); use 2 or 4 stages\n");
  EXPECT_FALSE(boost::filesystem::exists(dir.path("u.gpipe")));
}

}  // namespace
}  // namespace gpipe
