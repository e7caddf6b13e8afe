#pragma once

#include <cstddef>
#include <vector>

#include "passes/partition_units.h"

namespace gpipe {

// A partition into `num_stages` stages is "balanced" when its largest stage
// holds at most this much more than an even share of the units' weight.
constexpr double kBalancedStageRatio = 1.25;

// Granularity chosen for the user (`--stages N` without `--unit-depth`).
// Starts from the root's children and, while the units are fewer than
// `num_stages` or the best partition of their weights into `num_stages`
// stages has a stage heavier than kBalancedStageRatio times an even share,
// replaces the heaviest unit that can be refined by its children. A
// refinement that adds no unit (the children cannot be separated, see
// ModuleTree) is undone and that unit is kept whole. Units containing one of
// `required_cuts` (top-level node indices where a stage must begin) are
// refined first. Cuts stay at submodule boundaries.
std::vector<PartitionUnit> ChooseUnits(const ModuleTree& tree, size_t num_stages,
                                       const std::vector<size_t>& required_cuts = {});

// The largest stage's share of the total weight for the best partition of
// `units` into `num_stages` stages (1.0 when there are too few units).
double LargestStageShare(const std::vector<PartitionUnit>& units, size_t num_stages);

}  // namespace gpipe
