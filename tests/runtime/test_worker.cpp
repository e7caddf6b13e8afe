#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "runtime/rng_turnstile.h"
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

TEST(RngTurnstile, TurnsFollowTicketsAcrossThreads) {
  RngTurnstile turnstile;
  std::vector<int> order;
  Worker a("a"), b("b");
  uint64_t t0 = turnstile.TakeTicket(), t1 = turnstile.TakeTicket(), t2 = turnstile.TakeTicket();
  std::vector<std::future<void>> futures;
  // Worker b gets tickets 2 then... a gets 1 and 0 arrives last on b's queue.
  futures.push_back(a.Submit([&] { RngTurnstile::Turn turn(turnstile, t1); order.push_back(1); }));
  futures.push_back(b.Submit([&] { RngTurnstile::Turn turn(turnstile, t0); order.push_back(0); }));
  futures.push_back(b.Submit([&] { RngTurnstile::Turn turn(turnstile, t2); order.push_back(2); }));
  WaitAll(futures);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace gpipe
