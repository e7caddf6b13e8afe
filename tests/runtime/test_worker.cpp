#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

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

// A task holding a later ticket waits for every earlier one: worker a's
// task (ticket 1) is already waiting when worker b's (ticket 0) starts, and
// must not have entered after b has given it 100 ms (a turnstile that let it
// through would, so this fails without one; with one, it passes whatever
// the timing).
TEST(RngTurnstile, ALaterTicketWaitsForEveryEarlierOne) {
  RngTurnstile turnstile;
  std::vector<int> order;
  Worker a("a"), b("b");
  const uint64_t t0 = turnstile.TakeTicket(), t1 = turnstile.TakeTicket(),
                 t2 = turnstile.TakeTicket();
  std::promise<void> a_waiting;
  std::atomic<bool> a_entered{false};
  bool entered_early = true;
  std::vector<std::future<void>> futures;
  futures.push_back(a.Submit([&] {
    a_waiting.set_value();
    RngTurnstile::Turn turn(turnstile, t1);
    a_entered = true;
    order.push_back(1);
  }));
  futures.push_back(b.Submit([&, arrived = a_waiting.get_future().share()] {
    arrived.wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    entered_early = a_entered.load();
    RngTurnstile::Turn turn(turnstile, t0);
    order.push_back(0);
  }));
  futures.push_back(b.Submit([&] {
    RngTurnstile::Turn turn(turnstile, t2);
    order.push_back(2);
  }));
  WaitAll(futures);
  EXPECT_FALSE(entered_early);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace gpipe
