#include "compiler/stage_plan.h"

#include <numeric>
#include <sstream>

#include <c10/util/Exception.h>

namespace gpipe {

std::vector<int64_t> EvenBalance(int64_t num_units, int64_t num_stages) {
  std::vector<int64_t> balance;
  for (int64_t s = 0; s < num_stages; ++s) {
    balance.push_back(num_units / num_stages + (s < num_units % num_stages ? 1 : 0));
  }
  return balance;
}

std::vector<int64_t> ParseBalance(const std::string& text) {
  std::vector<int64_t> balance;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = std::string::npos;
    }
    TORCH_CHECK(used == item.size() && !item.empty(), "--balance '", text, "': '", item,
                "' is not an integer; give units per stage, e.g. --balance 3,3,2");
    balance.push_back(value);
  }
  TORCH_CHECK(!balance.empty(), "--balance is empty; give units per stage, e.g. --balance 3,3,2");
  return balance;
}

StagePlan PlanStages(const std::vector<PartitionUnit>& units, const BalanceRequest& request) {
  const auto num_units = static_cast<int64_t>(units.size());
  TORCH_CHECK(num_units > 0, "the model's forward has no operations to split");
  std::vector<int64_t> balance = request.balance;
  if (balance.empty()) {
    TORCH_CHECK(request.num_stages >= 1, "--stages is ", request.num_stages,
                "; it must be at least 1");
    TORCH_CHECK(request.num_stages <= num_units, "--stages ", request.num_stages,
                " asks for more stages than the model has units (", num_units,
                " top-level submodules); use --stages ", num_units, " or fewer");
    balance = EvenBalance(num_units, request.num_stages);
  }
  int64_t sum = 0;
  for (size_t s = 0; s < balance.size(); ++s) {
    TORCH_CHECK(balance[s] > 0, "--balance gives stage ", s, " ", balance[s],
                " units; every stage needs at least 1");
    sum += balance[s];
  }
  TORCH_CHECK(sum == num_units, "--balance sums to ", sum, " but the model has ", num_units,
              " units (top-level submodules); make it sum to ", num_units, " or use --stages N");
  StagePlan plan;
  size_t unit = 0;
  for (int64_t count : balance) {
    plan.first_node.push_back(units[unit].begin);
    unit += static_cast<size_t>(count);
  }
  return plan;
}

}  // namespace gpipe
