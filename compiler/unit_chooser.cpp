// ChooseUnits: descend the module tree where a unit is too large for a good
// balance. For a VGG (`features`, `avgpool`, `classifier`) into 4 stages:
//   {features, avgpool, classifier}            3 units < 4       -> refine features
//   {features.0, ..., features.30, avgpool, classifier}  balanced -> done
// For a DenseNet, refining `features.denseblock3` yields dense layers that
// the block's `features` list ties together (no boundary may separate them),
// so the block stays one unit and the next heaviest is tried.

#include "compiler/unit_chooser.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "compiler/partition.h"

namespace gpipe {
namespace {

std::vector<double> Weights(const std::vector<PartitionUnit>& units) {
  std::vector<double> weights;
  for (const auto& u : units) weights.push_back(u.weight);
  return weights;
}

bool Balanced(const std::vector<PartitionUnit>& units, size_t num_stages) {
  if (units.size() < num_stages) return false;
  return LargestStageShare(units, num_stages) * static_cast<double>(num_stages) <=
         kBalancedStageRatio;
}

bool ContainsRequiredCut(const PartitionUnit& unit, const std::vector<size_t>& required_cuts) {
  for (size_t cut : required_cuts) {
    if (cut > unit.begin && cut < unit.end) return true;
  }
  return false;
}

}  // namespace

double LargestStageShare(const std::vector<PartitionUnit>& units, size_t num_stages) {
  if (units.size() < num_stages || num_stages == 0) return 1.0;
  std::vector<double> weights = Weights(units);
  double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  if (total <= 0) return 1.0 / static_cast<double>(num_stages);
  return MaxStageCost(weights, OptimalPartition(weights, num_stages)) / total;
}

std::vector<PartitionUnit> ChooseUnits(const ModuleTree& tree, size_t num_stages,
                                       const std::vector<size_t>& required_cuts) {
  std::vector<ModulePath> frontier = tree.Frontier(1);
  std::vector<PartitionUnit> units = tree.Units(frontier);
  std::set<ModulePath> whole;  // units that refining does not split
  for (;;) {
    bool cut_inside = false;
    for (const auto& u : units) cut_inside = cut_inside || ContainsRequiredCut(u, required_cuts);
    if (!cut_inside && Balanced(units, num_stages)) return units;
    // Candidates: units that are one frontier module, heaviest first; those
    // holding a required cut before all others.
    std::vector<size_t> candidates;
    for (size_t u = 0; u < units.size(); ++u) {
      if (!units[u].merged && !whole.count(units[u].module) &&
          !tree.Children(units[u].module).empty()) {
        candidates.push_back(u);
      }
    }
    std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
      bool ra = ContainsRequiredCut(units[a], required_cuts),
           rb = ContainsRequiredCut(units[b], required_cuts);
      if (ra != rb) return ra;
      return units[a].weight > units[b].weight;
    });
    if (candidates.empty()) return units;  // as fine as the module tree goes
    const ModulePath target = units[candidates.front()].module;
    std::vector<ModulePath> refined;
    for (const auto& m : frontier) {
      if (m != target) {
        refined.push_back(m);
        continue;
      }
      for (auto& child : tree.Children(m)) refined.push_back(std::move(child));
    }
    std::vector<PartitionUnit> finer = tree.Units(refined);
    if (finer.size() <= units.size()) {
      whole.insert(target);
      continue;
    }
    frontier = std::move(refined);
    units = std::move(finer);
  }
}

}  // namespace gpipe
