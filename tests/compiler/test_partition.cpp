#include <gtest/gtest.h>

#include <functional>
#include <random>

#include <c10/util/Exception.h>

#include "compiler/partition.h"

namespace gpipe {
namespace {

// Every partition of n units into s stages, by brute force.
double BruteForceBest(const std::vector<double>& costs, size_t stages, const std::vector<size_t>& forced) {
  double best = 1e300;
  std::vector<size_t> starts{0};
  std::function<void(size_t)> extend = [&](size_t next) {
    if (starts.size() == stages) {
      for (size_t c : forced) {
        if (std::find(starts.begin(), starts.end(), c) == starts.end()) return;
      }
      best = std::min(best, MaxStageCost(costs, starts));
      return;
    }
    for (size_t u = next; u < costs.size(); ++u) {
      starts.push_back(u);
      extend(u + 1);
      starts.pop_back();
    }
  };
  extend(1);
  return best;
}

TEST(Partition, MatchesBruteForceOnRandomCosts) {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    size_t n = 1 + rng() % 12;
    size_t stages = 1 + rng() % std::min<size_t>(n, 5);
    std::vector<double> costs(n);
    for (auto& c : costs) c = trial % 7 == 0 ? std::floor(cost(rng)) : cost(rng);  // integers make ties
    std::vector<size_t> forced;
    if (trial % 3 == 0 && n > 2 && stages > 1) forced.push_back(1 + rng() % (n - 1));
    auto starts = OptimalPartition(costs, stages, forced);
    ASSERT_EQ(starts.size(), stages);
    EXPECT_EQ(starts[0], 0u);
    for (size_t s = 1; s < stages; ++s) EXPECT_LT(starts[s - 1], starts[s]);
    for (size_t c : forced) EXPECT_NE(std::find(starts.begin(), starts.end(), c), starts.end());
    EXPECT_DOUBLE_EQ(MaxStageCost(costs, starts), BruteForceBest(costs, stages, forced))
        << "trial " << trial;
  }
}

TEST(Partition, TiesGoToTheEarliestCutDeterministically) {
  EXPECT_EQ(OptimalPartition({1, 1, 1, 1}, 2), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(OptimalPartition({2, 1, 1, 1, 1}, 3), OptimalPartition({2, 1, 1, 1, 1}, 3));
}

TEST(Partition, IsolatesADominantUnit) {
  EXPECT_EQ(OptimalPartition({90, 2, 3, 5}, 2), (std::vector<size_t>{0, 1}));
}

TEST(Partition, ForcedCutsAndTooManyStagesAreRespected) {
  EXPECT_EQ(OptimalPartition({1, 1, 1, 1, 1, 1}, 2, {5}), (std::vector<size_t>{0, 5}));
  try {
    OptimalPartition({1, 2, 3}, 4);
    FAIL();
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot split 3 units into 4 stages"), std::string::npos);
  }
  EXPECT_THROW(OptimalPartition({1, 2, 3}, 1, {1}), c10::Error);  // forced cut needs 2 stages
}

}  // namespace
}  // namespace gpipe
