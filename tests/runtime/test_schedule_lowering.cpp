// SEND/RECV as schedule actions: AddCommunication's lowering (golden rows),
// the one dependency rule over ranks, and what ValidateSchedule says about a
// lowered schedule that is wrong.

#include <gtest/gtest.h>

#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/schedule_csv.h"
#include "runtime/schedule_ir.h"
#include "runtime/schedule_lowering.h"
#include "runtime/schedule_validate.h"
#include "tests/runtime/schedule_rows.h"

namespace gpipe {

namespace {

using testing::Rows;
using testing::RowsOf;

template <typename Fn>
std::string ErrorOf(Fn fn) {
  return testing::InvalidArgumentOf(fn);
}

// Stage 2 reads stage 1 and, over a skip route, stage 0; the model's output is stage 2's.
StageFlow SkipFlow() {
  StageFlow flow = StageFlow::Chain(3);
  flow.reads_from[2].push_back(0);
  flow.read_by[0].push_back(2);
  flow.feeds_loss[2] = true;
  flow.loss_stage = 2;
  return flow;
}

TEST(ScheduleLowering, CommunicationActionsPrintAndParseInPyTorchsSpelling) {
  EXPECT_EQ(ToString({ActionKind::kSendForward, 1, 0}), "1SEND_F0");
  EXPECT_EQ(ToString({ActionKind::kRecvForward, 2, 5}), "2RECV_F5");
  EXPECT_EQ(ToString({ActionKind::kSendBackward, 2, 5}), "2SEND_B5");
  EXPECT_EQ(ToString({ActionKind::kRecvBackward, 1, 12}), "1RECV_B12");
  for (const char* text : {"1SEND_F0", "2RECV_F5", "2SEND_B5", "1RECV_B12"}) {
    EXPECT_EQ(ToString(ParseAction(text).value()), text);
  }
}

TEST(ScheduleLowering, GpipeOnTwoRanksSendsAfterAndReceivesBefore) {
  const Schedule lowered = AddCommunication(BuildGpipe(2, 2), StageFlow::Chain(2), {0, 1});
  EXPECT_EQ(RowsOf(lowered), (Rows{"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                   "1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1"}));
  EXPECT_EQ(lowered.rank_of_stage, (std::vector<int>{0, 1}));
  // Receives wait for sends: the table on the simulated clock.
  EXPECT_EQ(FormatTable(lowered),
            "gpipe: 2 stages, 2 micro-batches, 2 workers\n"
            "step     0        1        2        3        4        5        6        7        8    "
            "    9        10       11\n"
            "worker 0 0F0      0SEND_F0 0F1      0SEND_F1 .        .        .        .        "
            "0RECV_B0 0B0      0RECV_B1 0B1\n"
            "worker 1 .        .        1RECV_F0 1F0      1RECV_F1 1F1      1B0      1SEND_B0 1B1  "
            "    1SEND_B1 .        .\n"
            "bubble fraction 0.667; peak in-flight per worker: 2 2\n");
}

TEST(ScheduleLowering, OnlyStagesWhoseValuesCrossRanksCommunicate) {
  const Schedule lowered = AddCommunication(Build1F1B(4, 2), StageFlow::Chain(4), {0, 0, 1, 1});
  EXPECT_EQ(RowsOf(lowered),
            (Rows{"0F0 0F1 0B0 0B1", "1F0 1SEND_F0 1F1 1SEND_F1 1RECV_B0 1B0 1RECV_B1 1B1",
                  "2RECV_F0 2F0 2RECV_F1 2F1 2B0 2SEND_B0 2B1 2SEND_B1", "3F0 3B0 3F1 3B1"}));
  // One rank: nothing to send.
  EXPECT_EQ(RowsOf(AddCommunication(Build1F1B(4, 2), StageFlow::Chain(4), {0, 0, 0, 0})),
            RowsOf(Build1F1B(4, 2)));
}

TEST(ScheduleLowering, ZeroBubbleSendsTheInputGradientAfterIAndWaitsForItBeforeI) {
  const Schedule lowered = AddCommunication(BuildZeroBubbleH1(2, 1), StageFlow::Chain(2), {0, 1});
  EXPECT_EQ(RowsOf(lowered),
            (Rows{"0F0 0SEND_F0 0RECV_B0 0I0 0W0", "1RECV_F0 1F0 1I0 1SEND_B0 1W0"}));
}

TEST(ScheduleLowering, ASkipRouteIsReceivedByItsReaderAndAModelOutputByTheLastRank) {
  // Stage 0 on rank 0 feeds stage 1 (rank 1) and, over the skip, stage 2 (rank 1).
  const Schedule lowered = AddCommunication(BuildGpipe(3, 1), SkipFlow(), {0, 1, 1});
  EXPECT_EQ(RowsOf(lowered), (Rows{"0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0",
                                   "2RECV_F0 2F0 2B0 2SEND_B0"}));
  EXPECT_NO_THROW(ValidateSchedule(lowered, SkipFlow()));
  // RECV_F of the skip's reader waits for the producer's SEND_F only.
  EXPECT_EQ(ActionDependencies({ActionKind::kRecvForward, 2, 0}, SkipFlow(), {0, 1, 1},
                               [](size_t, size_t) { return ActionKind::kBackward; }),
            (std::vector<Action>{{ActionKind::kSendForward, 0, 0}}));
  // Stage 1 feeds the model's output on rank 0 (the last stage's): it sends and is answered.
  StageFlow outputs = StageFlow::Chain(3);
  outputs.feeds_loss[1] = outputs.feeds_loss[2] = true;
  outputs.loss_stage = 2;
  EXPECT_EQ(RowsOf(AddCommunication(BuildGpipe(3, 1), outputs, {1, 1, 0})),
            (Rows{"0F0 0B0", "1F0 1SEND_F0 1RECV_B0 1B0", "2RECV_F0 2F0 2B0 2SEND_B0"}));
  EXPECT_NO_THROW(
      ValidateSchedule(AddCommunication(BuildGpipe(3, 1), outputs, {1, 1, 0}), outputs));
}

TEST(ScheduleLowering, DependenciesGoThroughTheReceives) {
  const StageFlow chain = StageFlow::Chain(2);
  const std::vector<int> ranks{0, 1};
  auto deps = [&](const Action& action) {
    return ActionDependencies(action, chain, ranks,
                              [](size_t, size_t) { return ActionKind::kBackward; });
  };
  using A = Action;
  EXPECT_EQ(deps({ActionKind::kForward, 1, 3}), (std::vector<A>{{ActionKind::kRecvForward, 1, 3}}));
  EXPECT_EQ(deps({ActionKind::kRecvForward, 1, 3}),
            (std::vector<A>{{ActionKind::kSendForward, 0, 3}}));
  EXPECT_EQ(deps({ActionKind::kSendForward, 0, 3}), (std::vector<A>{{ActionKind::kForward, 0, 3}}));
  EXPECT_EQ(deps({ActionKind::kBackward, 0, 3}),
            (std::vector<A>{{ActionKind::kForward, 0, 3}, {ActionKind::kRecvBackward, 0, 3}}));
  EXPECT_EQ(deps({ActionKind::kRecvBackward, 0, 3}),
            (std::vector<A>{{ActionKind::kSendBackward, 1, 3}}));
  EXPECT_EQ(deps({ActionKind::kSendBackward, 1, 3}),
            (std::vector<A>{{ActionKind::kBackward, 1, 3}}));
  // One process: the same rule as ever.
  EXPECT_EQ(ActionDependencies({ActionKind::kForward, 1, 3}, chain, {},
                               [](size_t, size_t) { return ActionKind::kBackward; }),
            (std::vector<A>{{ActionKind::kForward, 0, 3}}));
}

TEST(ScheduleLowering, EveryBuilderLoweredOnEveryPlacementRunsWithoutDeadlock) {
  const std::vector<std::vector<int>> placements{
      {0, 1, 2, 3}, {0, 0, 1, 1}, {0, 1, 0, 1}, {1, 0, 0, 1}};
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b"}) {
    for (size_t micro_batches : {2, 4, 8}) {
      const Schedule compute =
          BuildSchedule(name, 4, micro_batches, std::string(name) == "interleaved-1f1b" ? 2 : 1);
      for (const std::vector<int>& ranks : placements) {
        SCOPED_TRACE(std::string(name) + " M=" + std::to_string(micro_batches));
        const Schedule lowered = AddCommunication(compute, StageFlow::Chain(4), ranks);
        ScheduleStats stats;
        ASSERT_NO_THROW(stats = ValidateSchedule(lowered));
        // Communication keeps no activations.
        EXPECT_EQ(stats.peak_in_flight, ValidateSchedule(compute).peak_in_flight);
      }
    }
  }
}

TEST(ScheduleLowering, AWrongLoweredScheduleIsOneLineNamingTheFix) {
  const StageFlow chain = StageFlow::Chain(2);
  Schedule lowered = AddCommunication(BuildGpipe(2, 1), chain, {0, 1});
  Schedule missing = lowered;
  missing.actions[1].erase(missing.actions[1].begin());  // 1RECV_F0
  EXPECT_EQ(ErrorOf([&] { ValidateSchedule(missing); }),
            "schedule is missing 1RECV_F0 (stage 1 reads an output of a stage on another rank); "
            "add it before 1F0 to worker 1's list");
  Schedule late = lowered;
  std::swap(late.actions[1][0], late.actions[1][1]);  // 1F0 before its receive
  EXPECT_EQ(ErrorOf([&] { ValidateSchedule(late); }),
            "schedule deadlocks: worker 0 waits at 0RECV_B0 for 1SEND_B0, worker 1 waits at 1F0 "
            "for 1RECV_F0");
  Schedule same_rank = lowered;
  same_rank.rank_of_stage = {0, 0};
  EXPECT_EQ(ErrorOf([&] { ValidateSchedule(same_rank); }),
            "schedule has 0SEND_F0 but stage 0's values for that direction stay on its rank; "
            "remove it");
  Schedule no_ranks = lowered;
  no_ranks.rank_of_stage.clear();
  EXPECT_EQ(ErrorOf([&] { ValidateSchedule(no_ranks); }),
            "action 0SEND_F0 on worker 0 moves values between ranks, but the schedule runs every "
            "stage in one process; remove it (the runtime adds SEND/RECV itself for --ranks)");
  EXPECT_EQ(ErrorOf([&] {
              AddCommunication(lowered, chain, {0, 1});
            }),
            "schedule 'gpipe' already has 0SEND_F0; give compute actions only (F, B, I, W): the "
            "runtime adds SEND/RECV for --ranks");
  EXPECT_EQ(ErrorOf([&] {
              AddCommunication(BuildGpipe(2, 1), chain, {0, 1, 1});
            }),
            "schedule 'gpipe' has 2 stages but 3 ranks were given; give one rank per stage");
  // A schedule file with SEND/RECV reads back, and is refused the same way.
  EXPECT_EQ(
      ErrorOf([&] { ValidateSchedule(ReadScheduleCsv(WriteScheduleCsv(lowered), 2, "p.csv")); }),
      "action 0SEND_F0 on worker 0 moves values between ranks, but the schedule runs every "
      "stage in one process; remove it (the runtime adds SEND/RECV itself for --ranks)");
}

}  // namespace
}  // namespace gpipe
