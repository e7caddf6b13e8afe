#include <gtest/gtest.h>

#include "compiler/stage_plan.h"

namespace gpipe {
namespace {

std::vector<PartitionUnit> Units(size_t n) {
  std::vector<PartitionUnit> units;
  for (size_t i = 0; i < n; ++i) units.push_back({std::to_string(i), 2 * i, 2 * i + 2});
  return units;
}

std::string ErrorOf(const BalanceRequest& request, size_t units = 9) {
  try {
    PlanStages(Units(units), request);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(StagePlan, BalanceGivesUnitStarts) {
  BalanceRequest request;
  request.balance = {3, 3, 2, 1};
  EXPECT_EQ(PlanStages(Units(9), request).first_node, (std::vector<size_t>{0, 6, 12, 16}));
}

TEST(StagePlan, EvenSplitPutsTheRemainderFirst) {
  EXPECT_EQ(EvenBalance(9, 4), (std::vector<int64_t>{3, 2, 2, 2}));
  BalanceRequest request;
  request.num_stages = 9;
  EXPECT_EQ(PlanStages(Units(9), request).num_stages(), 9u);
}

TEST(StagePlan, BadBalancesNameTheFix) {
  BalanceRequest request;
  request.balance = {3, 3, 2};
  EXPECT_EQ(ErrorOf(request), "--balance sums to 8 but the model has 9 units (top-level "
                              "submodules); make it sum to 9 or use --stages N");
  request.balance = {3, 0, 6};
  EXPECT_EQ(ErrorOf(request), "--balance gives stage 1 0 units; every stage needs at least 1");
  request.balance = {-1, 10};
  EXPECT_NE(ErrorOf(request).find("every stage needs at least 1"), std::string::npos);
  request.balance.clear();
  request.num_stages = 10;
  EXPECT_EQ(ErrorOf(request), "--stages 10 asks for more stages than the model has units (9 "
                              "top-level submodules); use --stages 9 or fewer");
  request.num_stages = 0;
  EXPECT_EQ(ErrorOf(request), "--stages is 0; it must be at least 1");
}

TEST(StagePlan, ParseBalance) {
  EXPECT_EQ(ParseBalance("3,3,2"), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_THROW(ParseBalance("3,x"), c10::Error);
  EXPECT_THROW(ParseBalance("3,,2"), c10::Error);
  EXPECT_THROW(ParseBalance(""), c10::Error);
}

}  // namespace
}  // namespace gpipe
