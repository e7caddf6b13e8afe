// Multi-process pipelines as a user runs them: gpipe-launch starting ranks
// of gpipe-run --distributed on 127.0.0.1, checked against one process.

#include <gtest/gtest.h>

#include <boost/filesystem.hpp>
#include <chrono>
#include <fstream>
#include <sstream>

#include <map>
#include <mutex>

#include <torch/cuda.h>
#include <torch/version.h>

#include "compiler/compile.h"
#include "runtime/peer_group.h"
#include "runtime/pipeline.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::RunCli;
using testing::RunShell;
using testing::TempDir;
using testing::Options;
using testing::TestModel;

// mlp9 has dropout, so equality also checks that the ranks draw random
// numbers exactly as one process does.
const char* kTrain = " --sample-input 12x16 --train --steps 3 --lr 0.05 --seed 7";

std::string Compile(const TempDir& dir, const std::string& name, const std::string& options) {
  auto compiled = RunCli("gpipe-compile", TestModel(name) + " -o " + dir.path("a.gpipe") + " " + options);
  EXPECT_EQ(compiled.exit_code, 0) << compiled.output;
  return dir.path("a.gpipe");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void ExpectSameParameters(const std::string& expected_path, const std::string& actual_path) {
  auto expected = Pipeline::load(expected_path).named_parameters();
  auto actual = Pipeline::load(actual_path).named_parameters();
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(expected[k].first, actual[k].first);
    EXPECT_LE(testing::MaxAbsDiff(expected[k].second, actual[k].second), 1e-6) << expected[k].first;
  }
}

TEST(Distributed, TwoAndThreeProcessesTrainExactlyLikeOneProcess) {
  TempDir dir;
  std::string art = Compile(dir, "mlp9.pt", "--stages 3 --chunks 4");
  auto single = RunCli("gpipe-run", art + kTrain + " --save " + dir.path("single.gpipe"));
  ASSERT_EQ(single.exit_code, 0) << single.output;

  auto three = RunCli("gpipe-launch", "--nproc 3 " + art + kTrain + " --checkpoint always --save " +
                                          dir.path("three.gpipe"));
  ASSERT_EQ(three.exit_code, 0) << three.output;
  EXPECT_OUTPUT_HAS(three, "[rank 0] rank 0 of 3 runs 1 of 3 stages\n");
  EXPECT_OUTPUT_HAS(three, "[rank 2] rank 2 of 3 runs 1 of 3 stages and computes the loss\n");
  EXPECT_OUTPUT_HAS(three, "[rank 0] step 3/3  loss ");
  EXPECT_OUTPUT_HAS(three, "[rank 1] summary: 3 steps, median ");
  EXPECT_OUTPUT_HAS(three, "[rank 0] saved " + dir.path("three.gpipe"));
  ExpectSameParameters(dir.path("single.gpipe"), dir.path("three.gpipe"));

  auto two = RunCli("gpipe-launch", "--nproc 2 " + art + kTrain + " --ranks 0,1,1 --save " +
                                        dir.path("two.gpipe") + " --trace " + dir.path("t.json"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_OUTPUT_HAS(two, "[rank 1] rank 1 of 2 runs 2 of 3 stages and computes the loss\n");
  ExpectSameParameters(dir.path("single.gpipe"), dir.path("two.gpipe"));
  // The values crossing ranks are the schedule's SEND/RECV actions, each rank's in its timeline.
  const std::string rank0 = ReadFile(dir.path("t.rank0.json"));
  const std::string rank1 = ReadFile(dir.path("t.rank1.json"));
  EXPECT_NE(rank0.find("\"name\":\"SEND0.3\""), std::string::npos) << rank0.substr(0, 400);
  EXPECT_NE(rank0.find("\"name\":\"RECV0.3\""), std::string::npos);
  EXPECT_NE(rank1.find("\"name\":\"RECV1.3\""), std::string::npos) << rank1.substr(0, 400);
  EXPECT_NE(rank1.find("\"name\":\"SEND1.3\""), std::string::npos);
  EXPECT_EQ(rank1.find("SEND2."), std::string::npos) << "stage 2's values stay on rank 1";

  // Ranks chosen at compile time are the default at run time.
  auto compiled = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("r.gpipe") +
                                              " --stages 3 --chunks 4 --ranks 0,0,1");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  auto by_manifest = RunCli("gpipe-launch", "--nproc 2 " + dir.path("r.gpipe") + kTrain + " --save " + dir.path("r2.gpipe"));
  ASSERT_EQ(by_manifest.exit_code, 0) << by_manifest.output;
  EXPECT_OUTPUT_HAS(by_manifest, "[rank 0] rank 0 of 2 runs 2 of 3 stages\n");
  ExpectSameParameters(dir.path("single.gpipe"), dir.path("r2.gpipe"));

  // The loss each step is the one process's, digit for digit.
  auto loss_line = [](const std::string& output, const std::string& prefix) {
    size_t at = output.find(prefix + "step 3/3  loss ");
    return at == std::string::npos ? std::string("missing") : output.substr(at + prefix.size(), 24);
  };
  EXPECT_EQ(loss_line(single.output, ""), loss_line(three.output, "[rank 0] "));
  auto before = Pipeline::load(art).named_parameters();
  auto after = Pipeline::load(dir.path("two.gpipe")).named_parameters();
  EXPECT_FALSE(torch::equal(before[0].second, after[0].second)) << "training changed nothing";
}

// The library API, three ranks as threads of this process. multi_io has two
// tensor inputs and an int, an int crossing a cut, and a tuple output whose
// second part comes from stage 0: it travels to the loss rank directly, and
// so does a value stage 2 takes from stage 0 (a skip route).
TEST(Distributed, SkipRoutesIntsAndSeveralOutputsCrossRanks) {
  TempDir dir;
  CompileModel(TestModel("multi_io.pt"), dir.path("io.gpipe"), Options(3, 2));
  torch::manual_seed(0);
  std::vector<c10::IValue> inputs{torch::randn({6, 6}), torch::randn({6, 5}), c10::IValue(int64_t{3})};
  auto loss = [](const std::vector<at::Tensor>& out) { return out.at(0).pow(2).sum() + out.at(1).sum(); };

  Pipeline single = Pipeline::load(dir.path("io.gpipe"));
  const double want_loss = single.train_step(inputs, loss);
  std::map<std::string, at::Tensor> want_grads;
  for (const auto& [name, p] : single.named_parameters()) want_grads[name] = p.grad();

  std::mutex mutex;
  std::map<std::string, at::Tensor> got_grads;
  testing::RunRanksInThreads(3, [&](const std::shared_ptr<PeerGroup>& peers) {
    PipelineOptions options;
    options.peers = peers;
    Pipeline pipe = Pipeline::load(dir.path("io.gpipe"), options);
    EXPECT_EQ(pipe.num_local_stages(), 1u);
    EXPECT_EQ(pipe.holds_outputs(), peers->rank() == 2);
    EXPECT_DOUBLE_EQ(pipe.train_step(inputs, loss), want_loss) << "rank " << peers->rank();
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [name, p] : pipe.named_parameters()) got_grads[name] = p.grad();
  });
  ASSERT_EQ(got_grads.size(), want_grads.size());
  for (const auto& [name, grad] : want_grads) {
    EXPECT_LE(testing::MaxAbsDiff(got_grads.at(name), grad), 1e-6) << name;
  }
}

TEST(Distributed, ForwardOfAMultiProcessPipelineIsInferenceOnly) {
  TempDir dir;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), Options(2, 2));
  at::Tensor x = torch::randn({4, 16});
  at::Tensor want;
  {
    torch::NoGradGuard no_grad;
    Pipeline single = Pipeline::load(dir.path("m.gpipe"));
    single.eval();
    want = single.forward(x);
  }
  testing::RunRanksInThreads(2, [&](const std::shared_ptr<PeerGroup>& peers) {
    PipelineOptions options;
    options.peers = peers;
    Pipeline pipe = Pipeline::load(dir.path("m.gpipe"), options);
    pipe.eval();
    if (peers->rank() == 0) {
      try {
        pipe.forward(std::vector<c10::IValue>{x});
        ADD_FAILURE() << "forward with autograd on was accepted";
      } catch (const c10::Error& e) {
        EXPECT_EQ(std::string(e.what_without_backtrace()),
                  "forward() of a multi-process pipeline runs inference only: call it under torch::NoGradGuard, "
                  "and train with train_step(), which runs every rank's backward");
      }
    }
    torch::NoGradGuard no_grad;
    auto out = pipe.forward(std::vector<c10::IValue>{x});
    if (peers->rank() == 0) {
      EXPECT_TRUE(out.empty());
    } else {
      ASSERT_EQ(out.size(), 1u);
      EXPECT_TRUE(torch::equal(out[0], want));
    }
  });
}

TEST(Distributed, AKilledRankMakesTheOthersExitNamingIt) {
  TempDir dir;
  std::string art = Compile(dir, "mlp9.pt", "--stages 3 --chunks 4");
  auto start = std::chrono::steady_clock::now();
  auto result = RunShell("GPIPE_TEST_FAILPOINT=kill:1:2 " + testing::CliPath("gpipe-launch") + " --nproc 3 " + art +
                         " --sample-input 12x16 --train --steps 5 --timeout-s 60");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_OUTPUT_HAS(result, "[launch] rank 1 was killed by signal 9");
  // Whichever neighbour each survivor lost, its message leads to rank 1.
  for (const char* rank : {"[rank 0] ", "[rank 2] "}) {
    size_t line = result.output.find(std::string(rank) + "gpipe-run: error: ");
    ASSERT_NE(line, std::string::npos) << result.output;
    std::string message = result.output.substr(line, result.output.find('\n', line) - line);
    EXPECT_NE(message.find(" lost rank 1 while waiting for "), std::string::npos) << message;
  }
  EXPECT_LT(seconds, 30) << "a dead peer is noticed at once, not after --timeout-s";
}

TEST(Distributed, AHungRankMakesTheOthersGiveUpAfterTheTimeout) {
  TempDir dir;
  std::string art = Compile(dir, "mlp9.pt", "--stages 2 --chunks 2");
  auto start = std::chrono::steady_clock::now();
  auto result = RunShell("GPIPE_TEST_FAILPOINT=hang:1:2 " + testing::CliPath("gpipe-launch") +
                         " --nproc 2 --grace-s 2 " + art + " --sample-input 12x16 --train --steps 4 --timeout-s 3");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_OUTPUT_HAS(result, "[rank 0] gpipe-run: error: rank 0 lost rank 1 while waiting for stage 0's output 0 for "
                            "micro-batch 0 to be received: ");
  EXPECT_OUTPUT_HAS(result, "Timed out waiting 3000ms");
  EXPECT_OUTPUT_HAS(result, "did not answer within the timeout (3 s, --timeout-s)");
  EXPECT_OUTPUT_HAS(result, "[launch] rank 1 still runs 2 s after another rank failed; killing it");
  EXPECT_LT(seconds, 40);
}

TEST(Distributed, MismatchedRanksAndMissingEnvironmentAreClearErrors) {
  TempDir dir;
  std::string art = Compile(dir, "mlp9.pt", "--stages 3");
  auto wrong_size = RunCli("gpipe-launch", "--nproc 2 " + art + " --sample-input 12x16 --steps 1 --timeout-s 20");
  EXPECT_EQ(wrong_size.exit_code, 1) << wrong_size.output;
  EXPECT_OUTPUT_HAS(wrong_size, "[rank 0] gpipe-run: error: WORLD_SIZE is 2 but the artifact has 3 stages and "
                                "assigns no ranks; start 3 processes (one stage each), or say which rank runs "
                                "each stage with --ranks");

  auto no_env = RunShell("env -u RANK -u WORLD_SIZE " + testing::CliPath("gpipe-run") + " " + art +
                         " --sample-input 12x16 --distributed");
  EXPECT_EQ(no_env.exit_code, 1) << no_env.output;
  EXPECT_OUTPUT_HAS(no_env, "gpipe-run: error: WORLD_SIZE is not set; --distributed reads RANK, WORLD_SIZE, "
                            "MASTER_ADDR and MASTER_PORT as torchrun sets them");

  auto ranks_alone = RunCli("gpipe-run", art + " --sample-input 12x16 --ranks 0,0,1");
  EXPECT_EQ(ranks_alone.exit_code, 2) << ranks_alone.output;
  EXPECT_OUTPUT_HAS(ranks_alone, "--ranks needs --distributed");

  auto gap = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("gap.gpipe") + " --stages 3 --ranks 0,2,2");
  EXPECT_EQ(gap.exit_code, 1) << gap.output;
  EXPECT_OUTPUT_HAS(gap, "gpipe-compile: error: --ranks uses ranks 0,2; every rank from 0 to the largest must run a stage");
  EXPECT_FALSE(boost::filesystem::exists(dir.path("gap.gpipe")));

  auto no_artifact = RunCli("gpipe-launch", "--nproc 2 --steps 3");
  EXPECT_EQ(no_artifact.exit_code, 2) << no_artifact.output;
  EXPECT_OUTPUT_HAS(no_artifact, "the artifact is missing: gpipe-launch --nproc N ART.gpipe [gpipe-run options]");

  // After the artifact, options are gpipe-run's: a --nproc there is not the launcher's.
  auto late_nproc = RunCli("gpipe-launch", art + " --nproc 2");
  EXPECT_EQ(late_nproc.exit_code, 2) << late_nproc.output;
  EXPECT_EQ(
      testing::LastLine(late_nproc.output),
      "gpipe-launch: --nproc N is required and goes before the artifact: gpipe-launch --nproc N "
      "ART.gpipe [gpipe-run options]; see gpipe-launch --help\n");
}

TEST(Distributed, RanksStartedWithDifferentOptionsRefuseToRun) {
  TempDir dir;
  std::string art = Compile(dir, "mlp9.pt", "--stages 2");
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(testing::FreeTcpPort()) +
                          " WORLD_SIZE=2 ";
  const std::string run = testing::CliPath("gpipe-run") + " " + art + " --distributed --timeout-s 20 --sample-input 12x16 --train";
  auto result = RunShell("(" + env + "RANK=1 " + run + " --steps 4 > " + dir.path("rank1.txt") + " 2>&1 &); " + env +
                         "RANK=0 " + run + " --steps 3; sleep 1; cat " + dir.path("rank1.txt"));
  EXPECT_OUTPUT_HAS(result, "gpipe-run: error: rank 1 was started with different options (--sample-input, "
                            "--train, --steps, --lr, --loss, --seed, --save, --checkpoint-every) than rank 0");
}

// --backend nccl where NCCL cannot run is one line saying why, on this
// build: a LibTorch without CUDA (Debian's 1.13), or no GPU (pip's 2.x here).
TEST(Distributed, NcclWithoutCudaOrAGpuIsAClearError) {
  if (torch::cuda::device_count() > 0) GTEST_SKIP() << "this machine has a GPU, so NCCL can start";
  TempDir dir;
  std::string art = Compile(dir, "mlp9.pt", "--stages 2");
  auto result = RunCli("gpipe-launch", "--nproc 2 " + art + " --sample-input 12x16 --steps 1 --timeout-s 20 "
                                       "--backend nccl");
  EXPECT_EQ(result.exit_code, 1) << result.output;
#ifdef GPIPE_WITH_CUDA
  EXPECT_OUTPUT_HAS(result, "[rank 0] gpipe-run: error: --backend nccl needs a GPU, and rank 0 sees none; use "
                            "--backend gloo (or auto)");
#else
  EXPECT_OUTPUT_HAS(result, std::string("[rank 0] gpipe-run: error: --backend nccl needs gpipe-cpp built against "
                                        "a LibTorch with CUDA, and this one (LibTorch ") +
                                TORCH_VERSION + ") has none; build it with scripts/setup_torch2.sh, or use "
                                                "--backend gloo");
#endif
  auto typo = RunCli("gpipe-launch", "--nproc 2 " + art + " --sample-input 12x16 --steps 1 --backend mpi");
  EXPECT_OUTPUT_HAS(typo, "gpipe-run: error: unknown backend 'mpi'; use auto, gloo or nccl");
  auto alone = RunCli("gpipe-run", art + " --sample-input 12x16 --backend gloo");
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_OUTPUT_HAS(alone, "--backend needs --distributed");
}

// Two ranks, one GPU each, activations and gradients GPU to GPU over NCCL:
// the same weights as one process. Runs where two GPUs exist (bench/gpu.sh
// runs it on the lent GPU machine); skipped, and said so, elsewhere.
TEST(Distributed, TwoGpusOverNcclTrainExactlyLikeOneProcess) {
#ifndef GPIPE_WITH_CUDA
  GTEST_SKIP() << "NCCL needs a CUDA build (scripts/setup_torch2.sh)";
#else
  if (torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "needs 2 GPUs; this machine has " << torch::cuda::device_count();
  }
  TempDir dir;
  std::string art = Compile(dir, "mlp9.pt", "--stages 2 --chunks 4 --devices cuda:0,cuda:1");
  auto single = RunCli("gpipe-run", art + kTrain + " --save " + dir.path("single.gpipe"));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  for (const char* backend : {"nccl", "gloo"}) {
    const std::string out = dir.path(std::string(backend) + ".gpipe");
    auto two = RunCli("gpipe-launch", "--nproc 2 " + art + kTrain + " --backend " + backend + " --save " + out);
    ASSERT_EQ(two.exit_code, 0) << two.output;
    ExpectSameParameters(dir.path("single.gpipe"), out);
  }
#endif
}

}  // namespace
}  // namespace gpipe
