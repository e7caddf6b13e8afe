#include <gtest/gtest.h>

#include <set>

#include "runtime/rank_plan.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using Origin = ValueSource::Origin;

// Four stages: 0 -> 1 -> 2 -> 3, plus a skip route 0 -> 3 (stage 0's
// output 1) and stage 2's output 1 as a second model output.
Manifest FourStagesWithASkip() {
  Manifest m;
  m.input_names = {"x"};
  for (int s = 0; s < 4; ++s) {
    StageEntry e;
    e.file = "stage_" + std::to_string(s) + ".pt";
    e.device = "cpu";
    e.num_outputs = s == 0 || s == 2 ? 2 : 1;
    if (s == 0) e.inputs = {{Origin::ModelInput, 0, 0}};
    if (s > 0) e.inputs = {{Origin::StageOutput, s - 1, 0}};
    if (s == 3) e.inputs.push_back({Origin::StageOutput, 0, 1});
    m.stages.push_back(e);
  }
  m.outputs = {{Origin::StageOutput, 3, 0}, {Origin::StageOutput, 2, 1}};
  return m;
}

using testing::ErrorOf;

TEST(RankPlan, OneProcessHasNoRemoteUses) {
  RankPlan plan;
  EXPECT_FALSE(plan.distributed());
  EXPECT_TRUE(plan.IsLocal(3));
  EXPECT_TRUE(plan.HoldsOutputs());
  EXPECT_TRUE(plan.remote_uses(0).empty());
}

TEST(RankPlan, OneStagePerRankRoutesTheSkipStraightToItsConsumer) {
  RankPlan plan(FourStagesWithASkip(), 0, 4, {});
  EXPECT_EQ(plan.rank_of_stage(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(plan.output_rank(), 3);
  const auto& uses = plan.remote_uses(0);
  ASSERT_EQ(uses.size(), 2u);
  EXPECT_EQ(uses[0].consumer, 1);
  EXPECT_EQ(uses[0].rank, 1);
  // The skip value goes from rank 0 to rank 3 directly: stages 1 and 2 never see it.
  EXPECT_EQ(uses[1].output, 1);
  EXPECT_EQ(uses[1].consumer, 3);
  EXPECT_EQ(uses[1].input, 1);
  EXPECT_EQ(uses[1].rank, 3);
  EXPECT_EQ(plan.remote_uses(1).size(), 1u);
  // Stage 2's second output is a model output, gathered on the last stage's rank.
  const auto& uses2 = plan.remote_uses(2);
  ASSERT_EQ(uses2.size(), 2u);
  EXPECT_EQ(uses2[1].consumer, RankPlan::kModelOutputs);
  EXPECT_EQ(uses2[1].input, 1);
  EXPECT_EQ(uses2[1].rank, 3);
  EXPECT_TRUE(plan.remote_uses(3).empty()) << "the model's output 0 is on the output rank already";
}

TEST(RankPlan, StagesSharingARankExchangeNoMessages) {
  RankPlan plan(FourStagesWithASkip(), 1, 2, {0, 0, 1, 1});
  EXPECT_TRUE(plan.IsLocal(2));
  EXPECT_FALSE(plan.IsLocal(1));
  EXPECT_TRUE(plan.HoldsOutputs());
  ASSERT_EQ(plan.remote_uses(0).size(), 1u);  // only the skip crosses; 0 -> 1 stays on rank 0
  EXPECT_EQ(plan.remote_uses(0)[0].consumer, 3);
  ASSERT_EQ(plan.remote_uses(1).size(), 1u);
  EXPECT_TRUE(plan.remote_uses(2).empty());
}

TEST(RankPlan, TheManifestsRanksAreUsedWhenNoneAreGiven) {
  Manifest m = FourStagesWithASkip();
  for (int s = 0; s < 4; ++s) m.stages[s].rank = s < 3 ? 0 : 1;
  RankPlan plan(m, 0, 2, {});
  EXPECT_EQ(plan.rank_of_stage(), (std::vector<int>{0, 0, 0, 1}));
  RankPlan overridden(m, 0, 2, {0, 1, 1, 1});
  EXPECT_EQ(overridden.rank_of_stage(), (std::vector<int>{0, 1, 1, 1}));
}

TEST(RankPlan, MessagesAreUniqueWithinAStep) {
  RankPlan plan(FourStagesWithASkip(), 0, 4, {});
  std::set<int> seen;
  const size_t m = 5;
  for (bool backward : {false, true}) {
    for (size_t i = 0; i < m; ++i) {
      for (int64_t consumer = RankPlan::kModelOutputs; consumer < 4; ++consumer) {
        for (int64_t input = 0; input < 2; ++input) {
          EXPECT_TRUE(seen.insert(plan.Message(backward, i, m, consumer, input)).second);
        }
      }
    }
  }
  for (size_t s = 0; s < 4; ++s) EXPECT_TRUE(seen.insert(plan.SaveMessage(s)).second);
  for (int id : seen) EXPECT_LT(2 * static_cast<int64_t>(id) + 1, int64_t{1} << 31);
}

TEST(RankPlan, BadAssignmentsAreClearErrors) {
  const Manifest m = FourStagesWithASkip();
  EXPECT_EQ(ErrorOf([&] { RankPlan(m, 0, 2, {}); }),
            "WORLD_SIZE is 2 but the artifact has 4 stages and assigns no ranks; start 4 processes (one "
            "stage each), or say which rank runs each stage with --ranks, e.g. --ranks 0,0,1,...");
  EXPECT_EQ(ErrorOf([&] { RankPlan(m, 0, 2, {0, 1}); }),
            "--ranks lists 2 ranks but the artifact has 4 stages; give one rank per stage");
  EXPECT_EQ(ErrorOf([&] { RankPlan(m, 0, 2, {0, 1, 2, 1}); }),
            "stage rank 2 does not exist: WORLD_SIZE is 2; ranks are 0..1");
  EXPECT_EQ(ErrorOf([&] { RankPlan(m, 0, 3, {0, 0, 2, 2}); }),
            "WORLD_SIZE is 3 but only 2 ranks run a stage; every rank needs at least one stage (--ranks), "
            "or start fewer processes");
  EXPECT_EQ(ErrorOf([&] { ParseRanks({"0", "x1"}); }),
            "--ranks entry 'x1' is not a rank; give one non-negative integer per stage, e.g. --ranks 0,0,1");
  EXPECT_EQ(ErrorOf([&] { ParseRanks({"-1"}); }),
            "--ranks entry '-1' is not a rank; give one non-negative integer per stage, e.g. --ranks 0,0,1");
}

}  // namespace
}  // namespace gpipe
