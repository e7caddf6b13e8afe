#include "runtime/schedule.h"

namespace gpipe {

std::vector<std::vector<Task>> ForwardClockCycles(size_t m, size_t n) {
  std::vector<std::vector<Task>> clocks;
  if (m == 0 || n == 0) return clocks;
  for (size_t k = 0; k < m + n - 1; ++k) {
    std::vector<Task> tasks;
    for (size_t j = 0; j < n; ++j) {
      if (k >= j && k - j < m) tasks.push_back({k - j, j});
    }
    clocks.push_back(std::move(tasks));
  }
  return clocks;
}

std::vector<std::vector<Task>> BackwardClockCycles(size_t m, size_t n) {
  std::vector<std::vector<Task>> clocks = ForwardClockCycles(m, n);
  for (auto& tasks : clocks) {
    for (auto& t : tasks) t = {m - 1 - t.micro_batch, n - 1 - t.stage};
  }
  return clocks;
}

double BubbleFraction(size_t m, size_t n) {
  if (m == 0 || n == 0) return 0.0;
  return static_cast<double>(n - 1) / static_cast<double>(m + n - 1);
}

}  // namespace gpipe
