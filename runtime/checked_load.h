#pragma once

#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace gpipe {

// Reading what torch.save wrote without trusting it further than LibTorch
// 1.13 does. Its unpickler builds each tensor from the element count, sizes,
// strides and offset the pickle claims, and never compares them with the
// bytes of the record it read (pytorch/pytorch#109791): a damaged file gives
// a tensor whose elements lie past its data, and reading it overruns the
// heap (found by tests/fuzz/fuzz_data_readers.cpp). Its in-memory zip
// reader also copies past the end of a damaged archive; the file reader
// used here checks.

// The object in a torch.save file (zip format), every tensor in it checked
// against the record that holds its data; c10::Error naming `path` otherwise.
// Left to LibTorch: a string length in a damaged pickle is allocated before
// the short file is noticed (up to 4 GiB, then the error; pytorch#185443).
c10::IValue LoadTorchSaveFile(const std::string& path);

// Refuses a tensor whose elements (sizes, strides, offset) reach past the
// storage it claims, or with negative strides: "<what> claims shape [..] but
// its data holds N bytes; the file is damaged".
void CheckWithinStorage(const at::Tensor& tensor, const std::string& what);

}  // namespace gpipe
