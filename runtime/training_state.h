#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace gpipe {

// Where a training run stands after an optimizer step, saved beside the
// weights in a checkpoint artifact (record "training_state") so that
// gpipe-run --resume continues the run exactly: the next step's data, the
// optimizer's moments, the schedule's position and the random numbers
// (dropout) all as the uninterrupted run would have them.
struct TrainingState {
  int64_t step = 0;          // optimizer steps done
  int64_t epoch = 0;         // the epoch the next mini-batch comes from (0-based)
  int64_t batches_done = 0;  // mini-batches of that epoch already trained on
  std::string optimizer;     // torch::optim's own serialization (Optimizer::save)
  at::Tensor cpu_rng;        // the default CPU generator's state
  // What the run was started with that the continuation must share (the
  // optimizer and its settings, the loss, the batch size, the data's size):
  // name -> value, compared one by one on resume.
  std::map<std::string, std::string> options;
};

constexpr const char* kTrainingStateRecord = "training_state";

// A first line "gpipe-training-state crc32 HEX bytes N" over a
// torch::serialize archive: the checksum refuses a damaged record before
// LibTorch's unpickler reads it (it trusts the sizes a file claims; see
// runtime/checked_load.h).
std::string SerializeTrainingState(const TrainingState& state);
// `where` names the checkpoint in errors.
TrainingState ParseTrainingState(const std::string& bytes, const std::string& where);

// The first option whose value differs, as one line naming it, both values
// and the fix; nullopt when they agree.
std::optional<std::string> DescribeOptionMismatch(const std::map<std::string, std::string>& saved,
                                                  const std::map<std::string, std::string>& now,
                                                  const std::string& checkpoint);

}  // namespace gpipe
