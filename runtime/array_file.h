#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace gpipe {

// A file of fixed-size rows, read with pread so that a data set larger than
// memory streams from the page cache: a NumPy .npy array (rows along its
// first dimension) or a flat token file (uint16/uint32, one token per row).
// Every size the file claims is checked against the file's real size, with
// overflow checks, before anything is allocated. Not mmap: a file truncated
// under a mapping kills the reader with SIGBUS; here a file rewritten or
// truncated while a run reads it (its size or modification time changed) is
// a one-line error naming it. A file replaced by rename keeps being read as
// it was opened.
//
// Thread-safety: immutable after Open; Rows() may be called from any thread.
class ArrayFile {
 public:
  // A NumPy array as np.save writes it: little-endian bool, int8/16/32/64,
  // uint8/16/32, float16/32/64, C order. uint16/uint32 arrive as int32/int64
  // (LibTorch 1.13 has no unsigned 16/32-bit tensors).
  static std::shared_ptr<const ArrayFile> OpenNpy(const std::string& path);
  // A flat array of tokens as nanoGPT's train.bin: `bits` 16 or 32, unsigned.
  static std::shared_ptr<const ArrayFile> OpenTokens(const std::string& path, int bits);

  ~ArrayFile();
  ArrayFile(const ArrayFile&) = delete;
  ArrayFile& operator=(const ArrayFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t rows() const { return shape_.empty() ? 0 : shape_[0]; }
  const std::vector<int64_t>& row_shape() const {
    return row_shape_;
  }                                                 // shape without the first dim
  c10::ScalarType dtype() const { return dtype_; }  // of the tensors Rows() returns

  // Rows `indices` stacked: [indices.size(), row_shape...]; an index out of
  // range is an error naming the file.
  at::Tensor Rows(const std::vector<int64_t>& indices) const;
  // `count` consecutive elements from flat element `start` (token files).
  at::Tensor Elements(int64_t start, int64_t count) const;

 private:
  ArrayFile() = default;
  void Open(size_t data_offset, size_t data_bytes);
  void CheckUnchanged() const;
  // `bytes` of data from `offset` (after the header) into dst.
  void ReadAt(size_t offset, size_t bytes, uint8_t* dst) const;
  at::Tensor Convert(at::Tensor raw) const;

  std::string path_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> row_shape_;
  c10::ScalarType stored_ =
      c10::kFloat;  // as in the file (kShort for uint16 etc. before conversion)
  c10::ScalarType dtype_ = c10::kFloat;
  bool unsigned_ = false;  // stored as uint16/uint32
  size_t item_bytes_ = 0;
  size_t row_bytes_ = 0;
  int fd_ = -1;
  size_t data_offset_ = 0;
  int64_t opened_bytes_ = 0;     // the file's size and modification time when
  int64_t opened_mtime_ns_ = 0;  // opened: a change means it was rewritten
};

}  // namespace gpipe
