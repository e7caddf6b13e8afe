#pragma once

#include <cstddef>
#include <vector>

namespace gpipe {

// The contiguous partition of units with costs c_0..c_{n-1} into
// `num_stages` non-empty stages that minimises the largest stage cost (the
// GPipe step time is (M+S-1) times the slowest stage). `forced_cuts` are
// unit indices where a stage must begin. Exact dynamic programme, O(n^2 S);
// ties go to the earliest cut, so the result is deterministic. Returns the
// first unit of each stage (first is 0). Errors name the fix.
std::vector<size_t> OptimalPartition(const std::vector<double>& costs, size_t num_stages,
                                     const std::vector<size_t>& forced_cuts = {});

// The largest stage cost of a partition given by its stage starts.
double MaxStageCost(const std::vector<double>& costs, const std::vector<size_t>& starts);

}  // namespace gpipe
