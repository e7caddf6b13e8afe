#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/ivalue.h>

namespace gpipe {

// Micro-batching rule (docs/artifact-format.md, "Micro-batches"): a model
// input is *batched* if it is a tensor with at least one dimension; all
// batched inputs must share their size along dim 0 (the batch size B), and
// are split along dim 0 into `chunks` pieces whose sizes differ by at most one
// (the first B mod chunks pieces get one extra row, as torch.tensor_split).
// Every other input (scalars, 0-dim tensors, lists, ...) is given whole to
// every micro-batch.
struct MicroBatches {
  std::vector<std::vector<c10::IValue>> inputs;  // [micro-batch][model input]
  std::vector<int64_t> sizes;                    // rows in each micro-batch
  std::vector<bool> batched;                     // per model input
};

MicroBatches Scatter(const std::vector<c10::IValue>& inputs, int64_t chunks);

// Concatenates micro-batch results along dim 0 (the inverse of Scatter for
// one batched value).
at::Tensor Gather(const std::vector<at::Tensor>& parts);

}  // namespace gpipe
