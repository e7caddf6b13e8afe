#pragma once

// The schedules every schedule test runs, and the loss they train on
// (test_schedules.cpp, test_schedules_dropout.cpp).

#include <string>

#include <ATen/ATen.h>

namespace gpipe::testing {

struct ScheduleCase {
  std::string schedule;
  size_t virtual_stages;
};

inline const ScheduleCase kSchedules[] = {
    {"gpipe", 1}, {"1f1b", 1}, {"interleaved-1f1b", 2}, {"zb-h1", 1}};

// sum(output^2) / batch: each micro-batch's share is its rows' sum / batch.
inline at::Tensor SquaresShare(const at::Tensor& output, int64_t batch) {
  return output.to(at::kDouble).pow(2).sum() / static_cast<double>(batch);
}

}  // namespace gpipe::testing
