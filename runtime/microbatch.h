#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/ivalue.h>

#include "runtime/model_interface.h"

namespace gpipe {

// Micro-batching rule (docs/artifact-format.md, "Micro-batches"): a model
// input is *batched* if it is a tensor with at least one dimension; all
// batched inputs must share their size along dim 0 (the batch size B), and
// are split along dim 0 into `chunks` pieces whose sizes differ by at most one
// (the first B mod chunks pieces get one extra row, as torch.tensor_split).
// Every other input (scalars, 0-dim tensors, lists, None, ...) is given
// whole to every micro-batch, as is a tensor whose argument is not batched
// (`--unbatched-inputs`: an attention mask shared by every sample).
struct MicroBatches {
  std::vector<std::vector<c10::IValue>> inputs;  // [micro-batch][model input]
  std::vector<int64_t> sizes;                    // rows in each micro-batch
  std::vector<bool> batched;                     // per model input
};

// `signature` (optional) names the inputs in errors and says which are batched.
MicroBatches Scatter(const std::vector<c10::IValue>& inputs, int64_t chunks,
                     const std::vector<ForwardArgument>& signature = {});

// Concatenates micro-batch results along dim 0 (the inverse of Scatter for
// one batched value).
at::Tensor Gather(const std::vector<at::Tensor>& parts);

}  // namespace gpipe
