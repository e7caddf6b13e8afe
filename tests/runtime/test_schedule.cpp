#include <gtest/gtest.h>

#include "runtime/schedule.h"

namespace gpipe {
namespace {

using Clocks = std::vector<std::vector<Task>>;

TEST(Schedule, ForwardClockCyclesMatchTheGPipeTable) {
  // torchgpipe's test_clock_cycles, m=3 micro-batches, n=3 stages.
  Clocks want = {{{0, 0}},
                 {{1, 0}, {0, 1}},
                 {{2, 0}, {1, 1}, {0, 2}},
                 {{2, 1}, {1, 2}},
                 {{2, 2}}};
  EXPECT_EQ(ForwardClockCycles(3, 3), want);
}

TEST(Schedule, ForwardMoreMicroBatchesThanStages) {
  Clocks want = {{{0, 0}}, {{1, 0}, {0, 1}}, {{2, 0}, {1, 1}}, {{3, 0}, {2, 1}}, {{3, 1}}};
  EXPECT_EQ(ForwardClockCycles(4, 2), want);
}

TEST(Schedule, BackwardStartsAtTheLastMicroBatchOfTheLastStage) {
  Clocks want = {{{2, 1}}, {{1, 1}, {2, 0}}, {{0, 1}, {1, 0}}, {{0, 0}}};
  EXPECT_EQ(BackwardClockCycles(3, 2), want);
}

TEST(Schedule, EveryTaskExactlyOnce) {
  for (size_t m : {1, 2, 5}) {
    for (size_t n : {1, 3, 4}) {
      size_t count = 0;
      for (const auto& clock : BackwardClockCycles(m, n)) count += clock.size();
      EXPECT_EQ(count, m * n);
      EXPECT_EQ(ForwardClockCycles(m, n).size(), m + n - 1);
    }
  }
}

TEST(Schedule, BubbleFraction) {
  EXPECT_DOUBLE_EQ(BubbleFraction(8, 4), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(BubbleFraction(1, 1), 0.0);
}

}  // namespace
}  // namespace gpipe
