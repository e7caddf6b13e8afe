// The executor over fake tasks: it runs a plan's actions in an order that
// respects every wait, reports the earliest failure in plan order whichever
// thread met one, and never hangs when a task fails; with one thread per
// plan thread and with fewer threads shared by all (shared_threads).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "runtime/executor.h"
#include "runtime/schedule_ir.h"
#include "runtime/schedule_order.h"

namespace gpipe {
namespace {

struct FakePipeline {
  explicit FakePipeline(size_t stages) : flow(StageFlow::Chain(stages)) {
    for (size_t s = 0; s < stages; ++s) {
      thread_of_stage.emplace_back(s);
      workers.push_back(std::make_unique<Worker>("fake" + std::to_string(s)));
    }
  }
  ExecutionPlan Plan(const Schedule& schedule) const {
    ActionOrder order = OrderActions(schedule, flow, thread_of_stage, workers.size(),
                                     [](const Action&) { return true; });
    return PlanExecution(order, [&](const Action& a) {
      return ActionDependencies(a, flow, {},
                                [](size_t, size_t) { return ActionKind::kBackwardInput; });
    });
  }
  StageFlow flow;
  std::vector<std::optional<size_t>> thread_of_stage;
  std::vector<std::unique_ptr<Worker>> workers;
};

// One thread per plan thread, then 1, 2 and 3 threads shared by the 4.
const std::vector<std::optional<size_t>> kThreadModes = {std::nullopt, 1, 2, 3};

std::string ModeName(std::optional<size_t> shared) {
  return shared ? std::to_string(*shared) + " shared threads" : "a thread each";
}

TEST(Executor, EveryActionRunsOnceAfterWhatItWaitsFor) {
  for (const std::optional<size_t> shared : kThreadModes)
    for (const std::string name : {"gpipe", "1f1b", "zb-h1"}) {
      SCOPED_TRACE(ModeName(shared));
      FakePipeline pipe(4);
      const Schedule schedule = BuildSchedule(name, 4, 8);
      const ExecutionPlan plan = pipe.Plan(schedule);
      std::mutex mutex;
      std::vector<Action> ran;
      Execute(
          plan, pipe.workers,
          [&](const Action& a) {
            std::this_thread::sleep_for(
                std::chrono::microseconds(50 * (a.stage + 1)));  // uneven stages
            std::lock_guard<std::mutex> lock(mutex);
            ran.push_back(a);
          },
          shared);
      ASSERT_EQ(ran.size(), plan.actions.size()) << name;
      auto index = [&](const Action& want) -> std::optional<size_t> {
        for (size_t k = 0; k < ran.size(); ++k) {
          Action a = ran[k];
          if (a.kind == ActionKind::kBackward) a.kind = ActionKind::kBackwardInput;
          if (a == want) return k;
        }
        return std::nullopt;
      };
      for (size_t k = 0; k < ran.size(); ++k) {
        for (const Action& need : ActionDependencies(ran[k], pipe.flow, {}, [](size_t, size_t) {
               return ActionKind::kBackwardInput;
             })) {
          std::optional<size_t> at = index(need);
          ASSERT_TRUE(at.has_value()) << name << ": " << ToString(need) << " never ran";
          EXPECT_LT(*at, k) << name << ": " << ToString(ran[k]) << " ran before " << ToString(need);
        }
      }
    }
}

TEST(Executor, TheEarliestFailureInPlanOrderIsReportedAndNothingHangs) {
  FakePipeline pipe(4);
  const Schedule schedule = BuildSchedule("1f1b", 4, 8);
  const ExecutionPlan plan = pipe.Plan(schedule);
  // Fail at every position in turn; a later failure on a faster thread must not win.
  for (const std::optional<size_t> shared : kThreadModes)
    for (size_t fail_at = 0; fail_at < plan.actions.size(); fail_at += 5) {
      SCOPED_TRACE(ModeName(shared));
      const Action failing = plan.actions[fail_at];
      std::atomic<int> same_thread_after{0};
      std::atomic<bool> failed{false};
      try {
        Execute(
            plan, pipe.workers,
            [&](const Action& a) {
              if (failed && a.stage == failing.stage) ++same_thread_after;
              if (a == failing) {
                failed = true;
                throw std::runtime_error("task " + ToString(a));
              }
            },
            shared);
        FAIL() << "expected task " << ToString(failing) << " to fail";
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "task " + ToString(failing));
      }
      // The failed task's stage runs nothing after it.
      EXPECT_EQ(same_thread_after.load(), 0);
    }
}

TEST(Executor, APlanIsBuiltOnceAndReusedWithTheSameResult) {
  FakePipeline pipe(3);
  const ExecutionPlan plan = pipe.Plan(BuildSchedule("gpipe", 3, 4));
  // Waits: 1F0 waits for 0F0 and nothing else; 0B0 for 0F0 and 1B0.
  auto position = [&](const std::string& text) {
    const Action a = *ParseAction(text);
    for (size_t k = 0; k < plan.actions.size(); ++k) {
      if (plan.actions[k] == a) return k;
    }
    return plan.actions.size();
  };
  EXPECT_EQ(plan.waits_for[position("1F0")], (std::vector<size_t>{position("0F0")}));
  EXPECT_EQ(plan.waits_for[position("0B0")],
            (std::vector<size_t>{position("0F0"), position("1B0")}));
  // 0F0 wakes stage 1's thread only; 2B3 (the last stage) wakes stage 1's thread.
  EXPECT_EQ(plan.wakes[position("0F0")], (std::vector<size_t>{1}));
  EXPECT_EQ(plan.wakes[position("2B3")], (std::vector<size_t>{1}));
  for (int run = 0; run < 20; ++run) {
    std::atomic<size_t> count{0};
    Execute(plan, pipe.workers, [&](const Action&) { ++count; });
    EXPECT_EQ(count.load(), plan.actions.size());
  }
}

TEST(Executor, SharedThreadsRunOnlyThatManyWorkersAndOneRunsThePlanInOrder) {
  FakePipeline pipe(4);
  const ExecutionPlan plan = pipe.Plan(BuildSchedule("1f1b", 4, 8));
  for (size_t shared : {1, 2}) {
    std::mutex mutex;
    std::vector<std::thread::id> threads;
    std::vector<size_t> order;
    Execute(
        plan, pipe.workers,
        [&](const Action& a) {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
          std::lock_guard<std::mutex> lock(mutex);
          if (std::find(threads.begin(), threads.end(), std::this_thread::get_id()) ==
              threads.end())
            threads.push_back(std::this_thread::get_id());
          for (size_t k = 0; k < plan.actions.size(); ++k) {
            if (plan.actions[k] == a) order.push_back(k);
          }
        },
        shared);
    EXPECT_LE(threads.size(), shared);
    ASSERT_EQ(order.size(), plan.actions.size());
    if (shared == 1) {
      // One thread always takes the earliest ready action: the plan's own order.
      for (size_t k = 0; k < order.size(); ++k)
        EXPECT_EQ(order[k], k) << ToString(plan.actions[order[k]]);
    }
  }
}

}  // namespace
}  // namespace gpipe
