#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/schedule_csv.h"
#include "runtime/schedule_ir.h"
#include "runtime/schedule_validate.h"
#include "tests/runtime/schedule_rows.h"

namespace gpipe {

namespace {

using testing::Rows;
using testing::RowsOf;

// The inverse of RowsOf, for hand-written (possibly broken) schedules.
Schedule FromRows(size_t stages, size_t micro_batches, const Rows& rows,
                  std::vector<size_t> worker_of_stage) {
  Schedule schedule;
  schedule.name = "hand-written";
  schedule.num_stages = stages;
  schedule.num_micro_batches = micro_batches;
  schedule.num_workers = rows.size();
  schedule.worker_of_stage = std::move(worker_of_stage);
  for (const std::string& row : rows) {
    std::istringstream words(row);
    std::vector<Action> list;
    for (std::string word; words >> word;) list.push_back(ParseAction(word).value());
    schedule.actions.push_back(std::move(list));
  }
  return schedule;
}

template <typename Fn>
std::string ErrorOf(Fn fn) {
  return testing::InvalidArgumentOf(fn);
}

std::string ValidationError(const Schedule& schedule) {
  return ErrorOf([&] { ValidateSchedule(schedule); });
}

size_t MaxPeak(const Schedule& schedule) {
  const std::vector<size_t> peaks = ValidateSchedule(schedule).peak_in_flight;
  return *std::max_element(peaks.begin(), peaks.end());
}

TEST(ScheduleIr, ActionsPrintAndParseInPyTorchsSpelling) {
  EXPECT_EQ(ToString({ActionKind::kForward, 2, 5}), "2F5");
  EXPECT_EQ(ToString({ActionKind::kBackward, 1, 0}), "1B0");
  EXPECT_EQ(ToString({ActionKind::kBackwardInput, 0, 3}), "0I3");
  EXPECT_EQ(ToString({ActionKind::kBackwardWeight, 0, 3}), "0W3");
  for (const char* text : {"2F5", "1B0", "0I3", "0W3", "12F34"}) {
    EXPECT_EQ(ToString(ParseAction(text).value()), text);
  }
  EXPECT_EQ(ParseAction("12F34"), (Action{ActionKind::kForward, 12, 34}));
  for (const char* bad :
       {"", "F0", "1F", "1X0", "1F0x", " 1F0", "-1F0", "1f0", "1SEND_X0", "1SEND_F", "1SENDF0",
        "1send_f0", "1RECV_0", "99999999999999999999999F0"}) {
    EXPECT_FALSE(ParseAction(bad).has_value()) << bad;
  }
}

TEST(ScheduleIr, GpipeRunsEveryForwardThenEveryBackwardInMicroBatchOrder) {
  Schedule schedule = BuildGpipe(2, 3);
  EXPECT_EQ(RowsOf(schedule), (Rows{"0F0 0F1 0F2 0B0 0B1 0B2", "1F0 1F1 1F2 1B0 1B1 1B2"}));
  EXPECT_EQ(schedule.worker_of_stage, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(schedule.num_workers, 2u);
}

TEST(ScheduleIr, OneFOneBWarmsUpThenAlternatesThenDrains) {
  EXPECT_EQ(RowsOf(Build1F1B(4, 8)),
            (Rows{"0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7",
                  "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7",
                  "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7",
                  "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7"}));
}

TEST(ScheduleIr, OneFOneBWithFewerMicroBatchesThanStagesCapsTheWarmUp) {
  EXPECT_EQ(RowsOf(Build1F1B(3, 2)),
            (Rows{"0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1", "2F0 2B0 2F1 2B1"}));
}

TEST(ScheduleIr, InterleavedRunsGroupsOfMicroBatchesThroughEachChunk) {
  // 2 workers x 2 virtual stages: worker 0 holds stages 0 and 2.
  Schedule schedule = BuildSchedule("interleaved-1f1b", 4, 4, 2);
  EXPECT_EQ(RowsOf(schedule),
            (Rows{"0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
                  "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"}));
  EXPECT_EQ(schedule.worker_of_stage, (std::vector<size_t>{0, 1, 0, 1}));
  EXPECT_EQ(schedule.num_workers, 2u);
}

TEST(ScheduleIr, ZeroBubbleH1HoldsBackOneWeightPerLaterWorker) {
  EXPECT_EQ(RowsOf(BuildZeroBubbleH1(3, 4)),
            (Rows{"0F0 0F1 0F2 0I0 0W0 0F3 0I1 0W1 0I2 0W2 0I3 0W3",
                  "1F0 1F1 1I0 1F2 1I1 1W0 1F3 1I2 1W1 1I3 1W2 1W3",
                  "2F0 2I0 2F1 2I1 2F2 2I2 2W0 2F3 2I3 2W1 2W2 2W3"}));
}

TEST(ScheduleIr, EveryBuilderOutputValidates) {
  for (size_t stages = 1; stages <= 4; ++stages) {
    for (size_t micro_batches = 1; micro_batches <= 8; ++micro_batches) {
      for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
        SCOPED_TRACE(std::string(name) + " S=" + std::to_string(stages) +
                     " M=" + std::to_string(micro_batches));
        EXPECT_NO_THROW(ValidateSchedule(BuildSchedule(name, stages, micro_batches)));
      }
      if (stages % 2 == 0 && micro_batches % (stages / 2) == 0) {
        SCOPED_TRACE("interleaved S=" + std::to_string(stages) +
                     " M=" + std::to_string(micro_batches));
        EXPECT_NO_THROW(
            ValidateSchedule(BuildSchedule("interleaved-1f1b", stages, micro_batches, 2)));
      }
    }
  }
}

TEST(ScheduleIr, OneFOneBBoundsInFlightMicroBatchesByTheStageCount) {
  EXPECT_EQ(ValidateSchedule(Build1F1B(4, 16)).peak_in_flight, (std::vector<size_t>{4, 3, 2, 1}));
  EXPECT_EQ(ValidateSchedule(BuildGpipe(4, 16)).peak_in_flight,
            (std::vector<size_t>{16, 16, 16, 16}));
}

TEST(ScheduleIr, ZeroBubbleH1KeepsOneFOneBsPeakAndShrinksTheBubble) {
  for (size_t stages = 1; stages <= 4; ++stages) {
    for (size_t micro_batches = 1; micro_batches <= 8; ++micro_batches) {
      SCOPED_TRACE("S=" + std::to_string(stages) + " M=" + std::to_string(micro_batches));
      EXPECT_EQ(MaxPeak(BuildZeroBubbleH1(stages, micro_batches)),
                MaxPeak(Build1F1B(stages, micro_batches)));
    }
  }
  EXPECT_EQ(ValidateSchedule(BuildZeroBubbleH1(4, 8)).peak_in_flight,
            (std::vector<size_t>{4, 4, 4, 4}));
  // Unit costs: 1F1B idles 2(S-1) steps per worker, ZB-H1 only S-1.
  EXPECT_DOUBLE_EQ(ValidateSchedule(Build1F1B(4, 8)).bubble_fraction, 6.0 / 22.0);
  EXPECT_DOUBLE_EQ(ValidateSchedule(BuildZeroBubbleH1(4, 8)).bubble_fraction, 3.0 / 27.0);
}

TEST(ScheduleIr, ZeroBubbleH1RunsEveryWeightAfterItsInput) {
  for (size_t stages = 1; stages <= 4; ++stages) {
    for (size_t micro_batches = 1; micro_batches <= 8; ++micro_batches) {
      Schedule schedule = BuildZeroBubbleH1(stages, micro_batches);
      for (const std::vector<Action>& list : schedule.actions) {
        for (auto weight = list.begin(); weight != list.end(); ++weight) {
          if (weight->kind != ActionKind::kBackwardWeight) continue;
          const Action input{ActionKind::kBackwardInput, weight->stage, weight->micro_batch};
          EXPECT_NE(std::find(list.begin(), weight, input), weight) << ToString(*weight);
        }
      }
    }
  }
}

TEST(ScheduleIr, BuildScheduleNamesTheFix) {
  EXPECT_EQ(ErrorOf([] { BuildSchedule("x", 4, 8); }),
            "unknown schedule 'x'; use gpipe, 1f1b, interleaved-1f1b or zb-h1");
  EXPECT_EQ(ErrorOf([] { BuildSchedule("interleaved-1f1b", 8, 6, 2); }),
            "interleaved-1f1b runs micro-batches in groups of the worker count (4), but got 6 "
            "micro-batches; use 4 or 8 micro-batches");
  EXPECT_EQ(ErrorOf([] { BuildSchedule("interleaved-1f1b", 3, 4, 2); }),
            "interleaved-1f1b needs the stage count (3) to be a multiple of the virtual stages "
            "per worker (2); use 2 or 4 stages");
  EXPECT_EQ(ErrorOf([] { BuildSchedule("gpipe", 4, 8, 2); }),
            "schedule 'gpipe' runs one stage per worker but got 2 virtual stages; use 1, or use "
            "interleaved-1f1b");
  EXPECT_EQ(ErrorOf([] { BuildGpipe(0, 4); }),
            "gpipe got 0 stages and 4 micro-batches; it needs at least one of each");
  // A mistyped count is one line, before anything is allocated.
  EXPECT_EQ(ErrorOf([] { BuildSchedule("1f1b", 4, 100000000); }),
            "1f1b got 4 stages and 100000000 micro-batches, more than the 1000000 (stage, "
            "micro-batch) pairs a schedule may hold; use fewer micro-batches (at most 250000 for 4 "
            "stages)");
  EXPECT_EQ(ErrorOf([] { BuildSchedule("interleaved-1f1b", 4, SIZE_MAX, 2); }),
            "interleaved-1f1b got 4 stages and " + std::to_string(SIZE_MAX) +
                " micro-batches, more than the 1000000 (stage, micro-batch) pairs a schedule may "
                "hold; use fewer micro-batches (at most 250000 for 4 stages)");
}

TEST(ScheduleValidate, SimulatesOneStepPerAction) {
  ScheduleStats stats = ValidateSchedule(Build1F1B(2, 3));
  EXPECT_EQ(stats.time_steps, 8u);
  EXPECT_DOUBLE_EQ(stats.bubble_fraction, 4.0 / 16.0);
  EXPECT_EQ(stats.peak_in_flight, (std::vector<size_t>{2, 1}));
  using Steps = std::vector<std::optional<size_t>>;
  EXPECT_EQ(stats.start_step[0], (Steps{0, 1, 3, 4, 5, 7}));
  EXPECT_EQ(stats.start_step[1], (Steps{1, 2, 3, 4, 5, 6}));
}

TEST(ScheduleValidate, FormatTableShowsIdleStepsAsDots) {
  EXPECT_EQ(FormatTable(Build1F1B(2, 3)),
            "1f1b: 2 stages, 3 micro-batches, 2 workers\n"
            "step     0   1   2   3   4   5   6   7\n"
            "worker 0 0F0 0F1 .   0B0 0F2 0B1 .   0B2\n"
            "worker 1 .   1F0 1B0 1F1 1B1 1F2 1B2 .\n"
            "bubble fraction 0.250; peak in-flight per worker: 2 1\n");
}

TEST(ScheduleValidate, RejectsWorkersWaitingForEachOther) {
  Schedule schedule = FromRows(2, 2, {"0F0 0B0 0F1 0B1", "1F1 1F0 1B0 1B1"}, {0, 1});
  EXPECT_EQ(ValidationError(schedule),
            "schedule deadlocks: worker 0 waits at 0B0 for 1B0, worker 1 waits at 1F1 for 0F1");
}

TEST(ScheduleValidate, RejectsAMissingDependency) {
  Schedule schedule = FromRows(2, 2, {"0F0 0F1 0B0 0B1", "1B0 1F1 1B1"}, {0, 1});
  EXPECT_EQ(ValidationError(schedule), "schedule is missing 1F0; add it to worker 1's list");
  schedule = FromRows(2, 2, {"0F0 0F1 0B0 0B1", "1F0 1F1 1B1"}, {0, 1});
  EXPECT_EQ(ValidationError(schedule),
            "schedule is missing 1B0; add it (or 1I0 and 1W0) to worker 1's list");
}

TEST(ScheduleValidate, RejectsMisplacedAndRepeatedActions) {
  EXPECT_EQ(ValidationError(FromRows(2, 1, {"0F0 1F0 0B0", "1B0"}, {0, 1})),
            "action 1F0 is on worker 0 but stage 1 belongs to worker 1; move it to worker 1's "
            "list");
  EXPECT_EQ(ValidationError(FromRows(1, 2, {"0F0 0F1 0F1 0B0 0B1"}, {0})),
            "action 0F1 appears twice on worker 0; remove one");
  EXPECT_EQ(ValidationError(FromRows(2, 1, {"0F0 0B0", "1F0 1B0 2F0"}, {0, 1})),
            "action 2F0 on worker 1 names stage 2 but the schedule has 2 stages; use a stage "
            "below 2");
}

TEST(ScheduleValidate, RejectsBadlySplitBackwards) {
  EXPECT_EQ(ValidationError(FromRows(1, 1, {"0F0 0W0 0I0"}, {0})),
            "0W0 comes before 0I0 on worker 0; move 0W0 after 0I0");
  EXPECT_EQ(ValidationError(FromRows(1, 1, {"0F0 0I0"}, {0})),
            "schedule has 0I0 but no 0W0; add 0W0 after 0I0 to worker 0's list");
  EXPECT_EQ(ValidationError(FromRows(1, 1, {"0F0 0B0 0I0 0W0"}, {0})),
            "schedule has both 0B0 and 0I0; use B alone, or I and W");
}

TEST(ScheduleCsv, WritesOneRowPerWorker) {
  EXPECT_EQ(WriteScheduleCsv(BuildGpipe(2, 2)), "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n");
}

TEST(ScheduleCsv, RoundTripsEveryBuilder) {
  for (Schedule schedule : {BuildGpipe(4, 8), Build1F1B(4, 8), BuildZeroBubbleH1(4, 8),
                            BuildInterleaved1F1B(2, 2, 8)}) {
    SCOPED_TRACE(schedule.name);
    Schedule read = ReadScheduleCsv(WriteScheduleCsv(schedule), 4, "plan.csv");
    EXPECT_EQ(read.name, "plan.csv");
    EXPECT_EQ(read.actions, schedule.actions);
    EXPECT_EQ(read.num_workers, schedule.num_workers);
    EXPECT_EQ(read.num_micro_batches, 8u);
    EXPECT_EQ(read.worker_of_stage, schedule.worker_of_stage);
    EXPECT_NO_THROW(ValidateSchedule(read));
  }
}

TEST(ScheduleCsv, SkipsPyTorchsEmptyIdleCells) {
  Schedule read = ReadScheduleCsv("0F0,,0B0\r\n 1F0 ,1B0\r\n\r\n", 2, "plan.csv");
  EXPECT_EQ(RowsOf(read), (Rows{"0F0 0B0", "1F0 1B0"}));
  EXPECT_EQ(read.num_micro_batches, 1u);
}

// Found by tests/fuzz/run_fuzz.sh schedule: a trailing row of empty cells
// was a worker on reading but a blank line once written, so a plan did not
// read back as itself. Blank rows at the end are no workers; one before
// others is an idle worker, and survives the round trip.
TEST(ScheduleCsv, TrailingRowsOfEmptyCellsAreNoWorkersAndIdleRowsRoundTrip) {
  Schedule read = ReadScheduleCsv("0F0,0B0\n,\n , ,\n\n", 1, "plan.csv");
  EXPECT_EQ(read.num_workers, 1u);
  Schedule idle = ReadScheduleCsv("\n,\n0F0,0B0\n", 1, "plan.csv");
  EXPECT_EQ(RowsOf(idle), (Rows{"", "", "0F0 0B0"}));
  EXPECT_EQ(ReadScheduleCsv(WriteScheduleCsv(idle), 1, "again.csv").actions, idle.actions);
}

TEST(ScheduleCsv, NamesTheCellAndTheFix) {
  auto read = [](const std::string& text) {
    return ErrorOf([&] { ReadScheduleCsv(text, 2, "plan.csv"); });
  };
  EXPECT_EQ(read("0F0,0B0\n1F0,1B0,foo\n"),
            "'foo' at plan.csv:2:3 is not an action; write STAGE F|B|I|W MICRO_BATCH, e.g. 1F0");
  EXPECT_EQ(read("0F0,5F0\n"),
            "'5F0' at plan.csv:1:2 names stage 5 but the model has 2 stages; use a stage below 2");
  EXPECT_EQ(read("0F0,1F0\n1B0,0B0\n"),
            "'1B0' at plan.csv:2:1 puts stage 1 on a second worker (it is also at plan.csv:1:2); "
            "keep each stage's actions in one row");
  EXPECT_EQ(read("0F0,0B0\n"), "plan.csv has no actions for stage 1; add them to one row");
  // What is quoted is short and printable; a spreadsheet's byte-order mark is no part of a cell.
  EXPECT_EQ(read("0F0,0B0\n1F0,1B0," + std::string(100, 'x') + "\n"),
            "'xxxxxxxxxxxxxxxxxxxxxxxx'... (100 bytes) at plan.csv:2:3 is not an action; write "
            "STAGE F|B|I|W MICRO_BATCH, e.g. 1F0");
  EXPECT_EQ(read("0F0,0B0\n1F0,1B0,\x01\xff\n"),
            "'?"
            "?' at plan.csv:2:3 is not an action; write STAGE F|B|I|W MICRO_BATCH, e.g. 1F0");
  EXPECT_EQ(ReadScheduleCsv("\xEF\xBB\xBF"
                            "0F0,0B0\n1F0,1B0\n",
                            2, "plan.csv")
                .actions,
            ReadScheduleCsv("0F0,0B0\n1F0,1B0\n", 2, "plan.csv").actions);
  EXPECT_EQ(read("0F0,0B0,0F99\n1F0,1B0\n"),
            "'0F99' at plan.csv:1:3 names micro-batch 99 but plan.csv has only 5 actions; number "
            "micro-batches from 0 without gaps");
}

}  // namespace
}  // namespace gpipe
