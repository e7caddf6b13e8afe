// OptimalPartition: best[s][i] is the smallest possible largest-stage cost of
// putting units [0, i) into s stages; best[s][i] = min over j of
// max(best[s-1][j], cost(j, i)), where cost(j, i) is a prefix-sum difference
// and [j, i) must not contain a forced cut strictly inside it.

#include "compiler/partition.h"

#include <algorithm>
#include <limits>
#include <string>

#include <c10/util/Exception.h>

namespace gpipe {

std::vector<size_t> OptimalPartition(const std::vector<double>& costs, size_t num_stages,
                                     const std::vector<size_t>& forced_cuts) {
  const size_t n = costs.size();
  TORCH_CHECK(num_stages >= 1, "the number of stages must be at least 1");
  TORCH_CHECK(num_stages <= n, "cannot split ", n, " units into ", num_stages,
              " stages: every stage needs a unit; use --stages ", n,
              " or fewer, or a finer --unit-depth");
  std::vector<bool> forced(n + 1, false);
  for (size_t c : forced_cuts) {
    TORCH_CHECK(c > 0 && c < n, "a forced cut at unit ", c, " is outside 1..", n - 1);
    forced[c] = true;
  }
  const size_t num_forced = static_cast<size_t>(std::count(forced.begin(), forced.end(), true));
  TORCH_CHECK(num_forced + 1 <= num_stages, num_forced, " forced cuts need at least ",
              num_forced + 1, " stages, but ", num_stages, " were asked for");
  for (double c : costs) TORCH_CHECK(c >= 0, "unit costs must not be negative");

  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  // last_forced[i]: the largest forced cut <= i (0 if none): a stage ending
  // at i may start no earlier than it.
  std::vector<size_t> last_forced(n + 1, 0);
  for (size_t i = 1; i <= n; ++i) last_forced[i] = forced[i] ? i : last_forced[i - 1];

  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(num_stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> from(num_stages + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t s = 1; s <= num_stages; ++s) {
    for (size_t i = s; i <= n; ++i) {
      // The stage [j, i) may not contain a forced cut other than at j.
      size_t lowest = last_forced[i - 1];
      for (size_t j = std::max(lowest, s - 1); j < i; ++j) {
        if (best[s - 1][j] == inf) continue;
        double value = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (value < best[s][i]) {  // strict: the earliest j wins ties
          best[s][i] = value;
          from[s][i] = j;
        }
      }
    }
  }
  TORCH_CHECK(best[num_stages][n] != inf, "no partition of ", n, " units into ", num_stages,
              " stages respects the forced cuts");
  std::vector<size_t> starts(num_stages);
  for (size_t s = num_stages, i = n; s > 0; --s) {
    starts[s - 1] = from[s][i];
    i = from[s][i];
  }
  return starts;
}

double MaxStageCost(const std::vector<double>& costs, const std::vector<size_t>& starts) {
  double worst = 0;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : costs.size();
    double sum = 0;
    for (size_t u = starts[s]; u < end; ++u) sum += costs[u];
    worst = std::max(worst, sum);
  }
  return worst;
}

}  // namespace gpipe
