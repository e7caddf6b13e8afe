#include <gtest/gtest.h>

#include <future>
#include <stdexcept>

#include "runtime/worker.h"

namespace gpipe {
namespace {

TEST(Worker, RunsTasksInOrderAndReportsTheFirstFailure) {
  Worker worker("test");
  std::vector<int> order;
  std::vector<std::future<void>> futures;
  futures.push_back(worker.Submit([&] { order.push_back(1); }));
  futures.push_back(worker.Submit([&] { throw std::runtime_error("task 2 failed"); }));
  futures.push_back(worker.Submit([&] { order.push_back(3); }));
  futures.push_back(worker.Submit([&] { throw std::runtime_error("task 4 failed"); }));
  try {
    WaitAll(futures);
    FAIL() << "expected the failure";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "task 2 failed");
  }
  EXPECT_EQ(order, (std::vector<int>{1, 3}));  // later tasks still ran: nothing left half-done
  auto next = worker.Submit([&] { order.push_back(5); });
  next.get();
  EXPECT_EQ(order.back(), 5);
}

}  // namespace
}  // namespace gpipe
