#pragma once

#include <cstddef>
#include <vector>

namespace gpipe {

struct Task {
  size_t micro_batch;
  size_t stage;
  bool operator==(const Task& o) const { return micro_batch == o.micro_batch && stage == o.stage; }
};

// GPipe forward schedule: clock k runs every (micro-batch i, stage j) with
// i + j == k, stages in increasing order. M + S - 1 clocks in all.
std::vector<std::vector<Task>> ForwardClockCycles(size_t num_micro_batches, size_t num_stages);

// The mirror image for backward: clock k runs every (i, j) with
// (M-1-i) + (S-1-j) == k, stages in decreasing order, so the last
// micro-batch of the last stage starts and each stage sees micro-batches in
// decreasing order.
std::vector<std::vector<Task>> BackwardClockCycles(size_t num_micro_batches, size_t num_stages);

// Fraction of stage-clock slots left idle by the GPipe schedule: (S-1)/(M+S-1).
double BubbleFraction(size_t num_micro_batches, size_t num_stages);

}  // namespace gpipe
