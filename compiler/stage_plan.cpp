#include "compiler/stage_plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include <c10/util/Exception.h>

#include "compiler/partition.h"

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

namespace {

std::string UnitList(const std::vector<PartitionUnit>& units) {
  std::string names;
  for (size_t u = 0; u < units.size() && u < 12; ++u) names += (u ? ", " : "") + units[u].name;
  if (units.size() > 12) names += ", ...";
  return names;
}

// Units per stage from the best partition of the units' static weights, or
// an even count when the units carry none.
std::vector<int64_t> WeightedBalance(const std::vector<PartitionUnit>& units, int64_t num_stages) {
  std::vector<double> weights;
  double total = 0;
  for (const auto& u : units) {
    weights.push_back(u.weight);
    total += u.weight;
  }
  if (total <= 0) return EvenBalance(static_cast<int64_t>(units.size()), num_stages);
  std::vector<size_t> starts = OptimalPartition(weights, static_cast<size_t>(num_stages));
  std::vector<int64_t> balance;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : units.size();
    balance.push_back(static_cast<int64_t>(end - starts[s]));
  }
  return balance;
}

}  // namespace

StagePlan PlanStages(const std::vector<PartitionUnit>& units, const BalanceRequest& request) {
  const auto num_units = static_cast<int64_t>(units.size());
  TORCH_CHECK(num_units > 0, "the model's forward has no operations to split");
  std::vector<int64_t> balance = request.balance;
  if (balance.empty()) {
    TORCH_CHECK(request.num_stages >= 1, "--stages is ", request.num_stages,
                "; it must be at least 1");
    TORCH_CHECK(request.num_stages <= num_units, "--stages ", request.num_stages,
                " asks for more stages than the model has units: ", num_units, " (", UnitList(units),
                "), the submodule calls that cuts can fall between; use --stages ", num_units, " or fewer");
    balance = WeightedBalance(units, request.num_stages);
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

namespace {

bool InModule(const std::string& path, const std::string& name) {
  return path == name || (path.size() > name.size() && path.compare(0, name.size(), name) == 0 &&
                          path[name.size()] == '.');
}

// Every prefix of every node's module path, in first-seen order: the names
// --split-before accepts.
std::vector<std::string> ModuleNames(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  for (const auto& path : paths) {
    for (size_t dot = 0; dot != std::string::npos;) {
      dot = path.find('.', dot + 1);
      std::string prefix = path.substr(0, dot);
      if (!prefix.empty() && std::find(names.begin(), names.end(), prefix) == names.end()) {
        names.push_back(prefix);
      }
    }
  }
  return names;
}

}  // namespace

StagePlan PlanSplitBefore(const std::shared_ptr<torch::jit::Graph>& graph,
                          const std::vector<std::string>& names) {
  std::vector<std::string> paths;
  std::vector<size_t> indices;
  size_t index = 0;
  for (const torch::jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::Constant) {
      paths.push_back(ModulePathOf(node));
      indices.push_back(index);
    }
    ++index;
  }
  std::vector<size_t> cuts;
  for (const auto& name : names) {
    size_t k = 0;
    while (k < paths.size() && !InModule(paths[k], name)) ++k;
    if (k == paths.size()) {
      std::string valid;
      for (const auto& n : ModuleNames(paths)) valid += (valid.empty() ? "" : ", ") + n;
      TORCH_CHECK(false, "--split-before: the model has no submodule '", name,
                  "' with operations in forward; valid names: ", valid);
    }
    TORCH_CHECK(k > 0, "--split-before ", name, " would leave stage 0 empty: it is the first "
                "submodule the model runs; drop it from the list");
    TORCH_CHECK(std::find(cuts.begin(), cuts.end(), indices[k]) == cuts.end(),
                "--split-before names the same place twice ('", name, "')");
    cuts.push_back(indices[k]);
  }
  std::sort(cuts.begin(), cuts.end());
  StagePlan plan;
  plan.first_node.push_back(0);
  plan.first_node.insert(plan.first_node.end(), cuts.begin(), cuts.end());
  return plan;
}

}  // namespace gpipe
