#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "passes/partition_units.h"
#include "passes/split_stages.h"

namespace gpipe {

// How the user asked to cut the model: an explicit balance (units per stage)
// or a stage count to split as evenly as the unit count allows.
struct BalanceRequest {
  std::vector<int64_t> balance;  // e.g. {3, 3, 2}; empty = use num_stages
  int64_t num_stages = 1;
};

// Turns a request into a StagePlan over the units; errors say what to fix.
// `--stages N` takes the partition of the units' static weights whose
// heaviest stage is lightest (an even unit count when units carry none).
StagePlan PlanStages(const std::vector<PartitionUnit>& units, const BalanceRequest& request);

// The unit counts an even split of `num_units` into `num_stages` gives
// (earlier stages take the remainder), e.g. 9 units, 4 stages -> 3,2,2,2.
std::vector<int64_t> EvenBalance(int64_t num_units, int64_t num_stages);

std::vector<int64_t> ParseBalance(const std::string& text);  // "3,3,2"

// Cuts before the first node of each named submodule ("layer2.0", any
// depth). An unknown name is an error listing the valid ones.
StagePlan PlanSplitBefore(const std::shared_ptr<torch::jit::Graph>& graph,
                          const std::vector<std::string>& names);

}  // namespace gpipe
