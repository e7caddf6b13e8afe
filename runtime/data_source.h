#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/data/datasets/base.h>

#include "runtime/torch_compat.h"

namespace gpipe {

// One mini-batch of examples: the model's inputs (in forward's order) and
// the targets the loss compares its output with.
struct DataBatch {
  std::vector<at::Tensor> inputs;
  at::Tensor targets;  // undefined when the data set has none (--loss model)
};

// Training data from a file, as gpipe-run --data reads it:
//   DIR/            inputs.npy and targets.npy (or inputs_0.npy, inputs_1.npy, ...
//                   for several inputs), read with pread;
//   FILE.pt         torch.save({"inputs": X, "targets": Y}) (X a tensor or a list of tensors);
//   FILE.bin        flat tokens (nanoGPT's train.bin) with seq_len: example i is
//                   inputs tokens[i*L : i*L+L], targets tokens[i*L+1 : i*L+L+1].
struct DataOptions {
  std::optional<int64_t> seq_len;  // token files: tokens per example
  int token_bits = 16;             // token files: uint16 or uint32
};

// The examples of a data file, indexable in any order. Thread-safe: Get()
// may be called from a loader thread while another reads.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual int64_t size() const = 0;
  virtual DataBatch Get(const std::vector<int64_t>& indices) const = 0;
  // "50000 examples; inputs [3, 32, 32] float32; targets [] int64"
  virtual std::string Describe() const = 0;
};

std::shared_ptr<const DataSource> OpenDataSource(const std::string& path,
                                                 const DataOptions& options = {});

// What tells one data set from another at --resume: a CRC-32 of up to 64
// examples spread evenly over the source (their inputs' and targets' bytes,
// dtypes and shapes) and the count, as 8 hex digits. Another file, or the
// same one rewritten, differs unless every sampled example is unchanged; it
// reads 64 examples, not the whole data.
std::string DataFingerprint(const DataSource& source);

// The examples [begin, end) of another source (e.g. the training part and
// the held-out evaluation part of one file).
std::shared_ptr<const DataSource> SliceDataSource(std::shared_ptr<const DataSource> source,
                                                  int64_t begin, int64_t end);

// A DataSource as a torch::data batch dataset, so that torch::data's
// DataLoader (its samplers, its background workers) can feed a pipeline;
// `order` maps a sampler's positions to examples (an epoch's shuffle).
class DataSourceDataset : public torch::data::datasets::BatchDataset<DataSourceDataset, DataBatch> {
 public:
  DataSourceDataset(std::shared_ptr<const DataSource> source, std::vector<int64_t> order)
      : source_(std::move(source)), order_(std::move(order)) {}
  DataBatch get_batch(c10::ArrayRef<size_t> positions) override;
  compat::TorchOptional<size_t> size() const override { return order_.size(); }

 private:
  std::shared_ptr<const DataSource> source_;
  std::vector<int64_t> order_;
};

}  // namespace gpipe
