#include "runtime/microbatch.h"

#include <ATen/ATen.h>

namespace gpipe {

namespace {

std::string InputName(const std::vector<ForwardArgument>& signature, size_t k) {
  return k < signature.size() ? "'" + signature[k].name + "'" : std::to_string(k);
}

}  // namespace

MicroBatches Scatter(const std::vector<c10::IValue>& inputs, int64_t chunks,
                     const std::vector<ForwardArgument>& signature) {
  TORCH_CHECK(chunks >= 1, "chunks is ", chunks, "; it must be at least 1");
  MicroBatches mb;
  int64_t batch = -1;
  size_t first_batched = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto& v = inputs[k];
    bool is_batched = v.isTensor() && v.toTensor().dim() >= 1 && (k >= signature.size() || signature[k].batched);
    mb.batched.push_back(is_batched);
    if (!is_batched) continue;
    int64_t rows = v.toTensor().size(0);
    if (batch < 0) {
      batch = rows;
      first_batched = k;
    }
    TORCH_CHECK(rows == batch, "input ", InputName(signature, k), " has ", rows, " rows in dim 0 but input ",
                InputName(signature, first_batched), " has ", batch, "; batched inputs must share the batch size",
                k < signature.size() ? " (if " + InputName(signature, k) + " is the same for every sample, "
                                       "compile with --unbatched-inputs " + signature[k].name + ")"
                                     : std::string());
  }
  TORCH_CHECK(batch >= 0, "no input is a tensor with a batch dimension, so there is nothing to "
              "split into micro-batches; pass the batch as a tensor of shape [B, ...]");
  TORCH_CHECK(batch >= chunks, "chunks (", chunks, ") is larger than the batch size (", batch,
              "); use --chunks ", batch, " or fewer, or a larger batch");
  mb.inputs.resize(chunks);
  for (int64_t i = 0; i < chunks; ++i) {
    mb.sizes.push_back(batch / chunks + (i < batch % chunks ? 1 : 0));
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!mb.batched[k]) {
      for (auto& micro : mb.inputs) micro.push_back(inputs[k]);
      continue;
    }
    auto parts = inputs[k].toTensor().split_with_sizes(mb.sizes, 0);
    for (int64_t i = 0; i < chunks; ++i) mb.inputs[i].push_back(parts[i]);
  }
  return mb;
}

at::Tensor Gather(const std::vector<at::Tensor>& parts) {
  TORCH_INTERNAL_ASSERT(!parts.empty());
  if (parts.size() == 1) return parts[0];
  return at::cat(parts, 0);
}

}  // namespace gpipe
