// Bounded soak: 1000 small pipelined training steps with random stage and
// chunk counts (and a pipeline created and destroyed every 100 steps) must
// not grow the thread count, the open file descriptors or the memory.

#include <gtest/gtest.h>

#include <boost/filesystem.hpp>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
// The sanitizer runtime's (GCC ships no header for it here).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

#include <torch/torch.h>

#include "compiler/compile.h"
#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

size_t CountEntries(const char* dir) {
  size_t n = 0;
  for (const auto& entry : boost::filesystem::directory_iterator(dir)) n += !entry.path().empty();
  return n;
}

// The thread count, giving threads that are exiting a moment to go: a
// destroyed pipeline joins its workers before ~Pipeline returns, but threads
// they started (BLAS, OpenMP) may end a little later.
size_t SettledThreadCount(size_t expected) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  size_t now = CountEntries("/proc/self/task");
  while (now != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = CountEntries("/proc/self/task");
  }
  return now;
}

// The memory the process holds, in KiB: its resident set, or under
// AddressSanitizer the heap bytes in use (the sanitizer's quarantine keeps
// freed memory resident, so RSS there measures the tool: 285 MiB of growth
// over this test with no leak).
int64_t HeldKiB() {
#if defined(__SANITIZE_ADDRESS__)
  return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes() / 1024);
#else
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
#endif
}

TEST(Soak, ThousandRandomStepsLeaveNoThreadsDescriptorsOrMemoryBehind) {
  testing::TempDir dir;
  std::vector<std::string> artifacts;
  for (int64_t stages : {1, 2, 3, 5}) {
    CompileOptions options;
    options.balance.num_stages = stages;
    artifacts.push_back(dir.path("s" + std::to_string(stages) + ".gpipe"));
    CompileModel(testing::TestModel("mlp9.pt"), artifacts.back(), options);
  }
  // One intra-op thread per stage: libgomp creates OpenMP team threads lazily
  // (named after the worker that spawned them) and keeps them, which would
  // blur the count of the pipeline's own threads measured here.
  PipelineOptions options;
  options.threads_per_stage = 1;
  std::vector<Pipeline> pipes;
  for (const auto& a : artifacts) pipes.push_back(Pipeline::load(a, options));
  std::mt19937 rng(7);
  at::Tensor x = torch::randn({8, 16});
  auto step = [&](Pipeline& pipe) {
    pipe.set_chunks(1 + static_cast<int64_t>(rng() % 8));
    pipe.set_checkpoint(static_cast<CheckpointMode>(rng() % 3));
    for (auto& p : pipe.parameters()) p.mutable_grad() = at::Tensor();
    pipe.forward(x).sum().backward();
  };
  for (int warm = 0; warm < 20; ++warm) step(pipes[warm % pipes.size()]);
  const size_t threads = CountEntries("/proc/self/task");
  const size_t fds = CountEntries("/proc/self/fd");
  const int64_t held = HeldKiB();

  auto start = std::chrono::steady_clock::now();
  int steps = 0;
  for (; steps < 1000; ++steps) {
    step(pipes[rng() % pipes.size()]);
    if (steps % 100 == 99) {  // a pipeline's workers must be joined when it goes away
      Pipeline extra = Pipeline::load(artifacts[rng() % artifacts.size()], options);
      step(extra);
    }
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << "soak exceeded 60 s";
  }
  EXPECT_EQ(SettledThreadCount(threads), threads);
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds);
  EXPECT_LT(HeldKiB() - held, 64 * 1024) << "memory grew by more than 64 MiB over 1000 steps";
}

// The paths the schedule, recompute and checkpoint work added: random
// schedules (gpipe, 1f1b, interleaved-1f1b, zb-h1) x checkpoint policies x
// stage counts x chunk counts through train_step with a loss per
// micro-batch, and every 40 steps a resume point (the pipeline saved,
// dropped and loaded again from the file, as --resume does).
TEST(Soak, RandomSchedulesPoliciesChunksAndResumePointsLeaveNothingBehind) {
  testing::TempDir dir;
  std::vector<std::string> artifacts;
  for (int64_t stages : {2, 4}) {
    CompileOptions options;
    options.balance.num_stages = stages;
    artifacts.push_back(dir.path("s" + std::to_string(stages) + ".gpipe"));
    CompileModel(testing::TestModel("mlp9.pt"), artifacts.back(), options);
  }
  struct Kind {
    size_t artifact;
    std::string schedule;
    size_t virtual_stages;
  };
  const std::vector<Kind> kinds = {{0, "gpipe", 1}, {0, "1f1b", 1},
                                   {1, "1f1b", 1},  {1, "interleaved-1f1b", 2},
                                   {0, "zb-h1", 1}, {1, "zb-h1", 1}};
  auto load = [&](const Kind& kind, const std::string& path) {
    PipelineOptions options;
    options.threads_per_stage = 1;  // see the test above
    options.chunks = 2;
    options.schedule = kind.schedule;
    options.virtual_stages = kind.virtual_stages;
    return Pipeline::load(path, options);
  };
  std::vector<Pipeline> pipes;
  for (const Kind& kind : kinds) pipes.push_back(load(kind, artifacts[kind.artifact]));
  const CheckpointMode policies[] = {CheckpointMode::Never, CheckpointMode::Always,
                                     CheckpointMode::ExceptLast, CheckpointMode::Selective};
  std::mt19937 rng(11);
  at::Tensor x = torch::randn({8, 16});
  auto step = [&](Pipeline& pipe) {
    pipe.set_chunks(int64_t{2} << (rng() % 3));  // 2, 4 or 8: every schedule runs them
    pipe.set_checkpoint(policies[rng() % 4]);
    for (auto& p : pipe.parameters()) p.mutable_grad() = at::Tensor();
    pipe.train_step({x}, [](const MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
      return outputs.at(0).pow(2).sum() / static_cast<double>(rows.batch);
    });
  };
  for (size_t warm = 0; warm < 2 * kinds.size(); ++warm) step(pipes[warm % pipes.size()]);
  const size_t threads = CountEntries("/proc/self/task");
  const size_t fds = CountEntries("/proc/self/fd");
  const int64_t held = HeldKiB();

  auto start = std::chrono::steady_clock::now();
  for (int steps = 0; steps < 400; ++steps) {
    const size_t k = rng() % kinds.size();
    step(pipes[k]);
    if (steps % 40 == 39) {  // a resume point
      const std::string saved = dir.path("resume.gpipe");
      pipes[k].save(saved);
      pipes[k] = load(kinds[k], saved);
      step(pipes[k]);
    }
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120))
        << "soak exceeded 120 s";
  }
  EXPECT_EQ(SettledThreadCount(threads), threads);
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds);
  EXPECT_LT(HeldKiB() - held, 64 * 1024) << "memory grew by more than 64 MiB over 400 steps";
}

}  // namespace
}  // namespace gpipe
