// Every schedule in several processes: the loss of each micro-batch runs on
// the rank of the last stage inside the schedule, gradients cross ranks as in
// one process, dropout draws by key wherever a stage runs, and training ends
// with the one-process weights, bitwise.

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include <torch/script.h>

#include "runtime/peer_group.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::RunCli;
using testing::TempDir;
using testing::TestModel;

struct DistributedCase {
  std::string schedule;
  size_t virtual_stages;
  std::vector<int> ranks;  // rank of each stage
};

using Gradients = std::map<std::string, at::Tensor>;

// The loss and gradients of one train_step, in one process or (with `ranks`)
// in as many ranks as threads of this process.
struct StepResult {
  double loss = 0;
  Gradients grads;
};

StepResult TrainOnce(const std::string& artifact, const DistributedCase& c, CheckpointMode mode,
                     const std::vector<c10::IValue>& inputs, const MicroBatchLossFunction& loss,
                     bool distributed) {
  auto run = [&](const std::shared_ptr<PeerGroup>& peers, StepResult& result, std::mutex& mutex) {
    PipelineOptions options;
    options.schedule = c.schedule;
    options.virtual_stages = c.virtual_stages;
    options.checkpoint = mode;
    // The same intra-op threads everywhere: ATen splits some reductions by
    // thread count (LayerNorm's weight gradient), and a stage alone on its
    // rank would otherwise get both cores.
    options.threads_per_stage = 1;
    if (peers) {
      options.peers = peers;
      options.ranks = c.ranks;
    }
    Pipeline pipe = Pipeline::load(artifact, options);
    pipe.train();  // dropout on: draws are keyed, so threads as ranks draw what one process does
    const double value = pipe.train_step(inputs, loss);
    std::lock_guard<std::mutex> lock(mutex);
    result.loss = value;  // every rank returns the step's summed loss
    for (const auto& [name, p] : pipe.named_parameters()) {
      if (p.grad().defined()) result.grads[name] = p.grad().clone();
    }
  };
  StepResult result;
  std::mutex mutex;
  if (!distributed) {
    run(nullptr, result, mutex);
    return result;
  }
  int world = 0;
  for (int r : c.ranks) world = std::max(world, r + 1);
  std::mutex ranks_mutex;
  std::vector<double> losses;
  testing::RunRanksInThreads(world, [&](const std::shared_ptr<PeerGroup>& peers) {
    StepResult mine;
    std::mutex unused;
    run(peers, mine, unused);
    std::lock_guard<std::mutex> lock(ranks_mutex);
    losses.push_back(mine.loss);
    for (auto& [name, grad] : mine.grads) result.grads[name] = grad;
  });
  for (double l : losses) EXPECT_DOUBLE_EQ(l, losses.front()) << "ranks disagree on the loss";
  result.loss = losses.front();
  return result;
}

void ExpectSameStep(const StepResult& want, const StepResult& got, const std::string& label) {
  EXPECT_DOUBLE_EQ(got.loss, want.loss) << label;
  ASSERT_EQ(got.grads.size(), want.grads.size()) << label;
  for (const auto& [name, grad] : want.grads) {
    ASSERT_TRUE(got.grads.count(name)) << label << " " << name;
    EXPECT_EQ(testing::MaxAbsDiff(got.grads.at(name), grad), 0.0)
        << label << " " << name << ": bitwise";
  }
}

// sum(output^2) / batch, one share per micro-batch.
at::Tensor SquaresShare(const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
  return outputs.at(0).pow(2).sum() / static_cast<double>(rows.batch);
}

TEST(DistributedSchedules, EveryScheduleInTwoAndFourRanksGivesTheOneProcessGradients) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), testing::Options(4, 4));
  at::manual_seed(0);
  const std::vector<c10::IValue> inputs{at::randn({12, 16})};
  const DistributedCase cases[] = {
      {"gpipe", 1, {0, 0, 1, 1}},
      {"1f1b", 1, {0, 0, 1, 1}},
      {"1f1b", 1, {0, 1, 2, 3}},
      {"interleaved-1f1b", 2, {0, 1, 0, 1}},  // each rank two non-adjacent stages
      {"zb-h1", 1, {0, 1, 2, 3}},
  };
  for (const DistributedCase& c : cases) {
    for (CheckpointMode mode :
         {CheckpointMode::Never, CheckpointMode::Always, CheckpointMode::Selective}) {
      std::string label = c.schedule + " " + ToString(mode) + " on " +
                          std::to_string(c.ranks.back() + 1) + " ranks";
      StepResult one = TrainOnce(dir.path("m.gpipe"), c, mode, inputs, SquaresShare, false);
      StepResult several = TrainOnce(dir.path("m.gpipe"), c, mode, inputs, SquaresShare, true);
      ExpectSameStep(one, several, label);
      EXPECT_GT(one.loss, 0) << label;
    }
  }
}

// multi_io: a model output from stage 0 reaches the loss's rank as a message
// per micro-batch and its gradient goes back the same way; stage 2 reads
// stage 0 directly (a skip route) and an int crosses a cut.
TEST(DistributedSchedules, OutputsAndSkipRoutesFromOtherRanksReachTheLossInsideTheSchedule) {
  TempDir dir;
  CompileModel(TestModel("multi_io.pt"), dir.path("io.gpipe"), testing::Options(3, 2));
  at::manual_seed(1);
  const std::vector<c10::IValue> inputs{at::randn({6, 6}), at::randn({6, 5}),
                                        c10::IValue(int64_t{3})};
  auto loss = [](const MicroBatchRows& rows, const std::vector<at::Tensor>& out) {
    return (out.at(0).pow(2).sum() + out.at(1).sum()) / static_cast<double>(rows.batch);
  };
  for (const std::string schedule : {"1f1b", "zb-h1"}) {
    DistributedCase c{schedule, 1, {0, 1, 2}};
    StepResult one =
        TrainOnce(dir.path("io.gpipe"), c, CheckpointMode::ExceptLast, inputs, loss, false);
    StepResult three =
        TrainOnce(dir.path("io.gpipe"), c, CheckpointMode::ExceptLast, inputs, loss, true);
    ExpectSameStep(one, three, schedule);
    EXPECT_EQ(three.grads.size(), 6u) << "every stage's weights got gradients";
  }
}

// Real processes with dropout: every rank draws by key, so three steps end
// with the one process's weights, bitwise; and every schedule and checkpoint
// mode (each sums a stage's micro-batches first to last) ends with the same
// weights as every other.
TEST(DistributedSchedules, GpipeLaunchTrainsEverySchedulesWeightsLikeOneProcess) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("a.gpipe") +
                                              " --stages 4 --chunks 4");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  const std::string train = " --sample-input 12x16 --train --steps 3 --lr 0.05 --seed 7";
  struct Run {
    std::string options;  // the same in one process and in several
    int processes;
    std::string ranks;
  };
  const Run runs[] = {
      {"--schedule 1f1b --checkpoint always", 2, " --ranks 0,0,1,1"},
      {"--schedule interleaved-1f1b --virtual-stages 2", 2, " --ranks 0,1,0,1"},
      {"--schedule zb-h1 --checkpoint except_last", 4, ""},
      {"--schedule gpipe --checkpoint never", 4, ""},
  };
  std::vector<std::pair<std::string, at::Tensor>> reference;  // the first run's weights
  for (const Run& run : runs) {
    const std::string& schedule = run.options;
    auto single = RunCli("gpipe-run", dir.path("a.gpipe") + train + " " + schedule + " --save " +
                                          dir.path("single.gpipe"));
    ASSERT_EQ(single.exit_code, 0) << single.output;
    auto several = RunCli("gpipe-launch", "--nproc " + std::to_string(run.processes) + " " +
                                              dir.path("a.gpipe") + train + " " + schedule +
                                              run.ranks + " --save " + dir.path("several.gpipe"));
    ASSERT_EQ(several.exit_code, 0) << several.output;
    EXPECT_OUTPUT_HAS(several, "[rank 0] step 3/3  loss ");
    auto want = Pipeline::load(dir.path("single.gpipe")).named_parameters();
    auto got = Pipeline::load(dir.path("several.gpipe")).named_parameters();
    if (reference.empty()) reference = want;
    ASSERT_EQ(want.size(), got.size());
    ASSERT_EQ(want.size(), reference.size());
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(testing::MaxAbsDiff(want[k].second, got[k].second), 0.0)
          << schedule << " " << want[k].first << ": bitwise";
      EXPECT_EQ(testing::MaxAbsDiff(reference[k].second, want[k].second), 0.0)
          << schedule << " " << want[k].first << ": bitwise like " << runs[0].options;
    }
    auto loss_line = [](const std::string& output, const std::string& prefix) {
      size_t at = output.find(prefix + "step 3/3  loss ");
      return at == std::string::npos ? std::string("missing")
                                     : output.substr(at + prefix.size(), 24);
    };
    EXPECT_EQ(loss_line(single.output, ""), loss_line(several.output, "[rank 0] ")) << schedule;
  }
}

}  // namespace
}  // namespace gpipe
