// libFuzzer target: any bytes as a .npy file, a token file, the training
// state a checkpoint carries (--resume), or a .pt data file (torch.save). Each reader must either
// return something consistent with the file (rows that can all be read) or throw c10::Error; never
// crash, over-read, hang or trip a sanitizer. The first byte picks the reader; the rest is the
// file.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <c10/util/Exception.h>

#include "runtime/array_file.h"
#include "runtime/data_source.h"
#include "runtime/training_state.h"

namespace {

std::string TempFile(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = "/tmp/fuzz_data_readers." + std::to_string(getpid()) + suffix;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0] % 4;
  try {
    if (which == 2) {
      gpipe::ParseTrainingState(std::string(reinterpret_cast<const char*>(data + 1), size - 1),
                                "fuzz");
      return 0;
    }
    if (which == 3) {
      auto source = gpipe::OpenDataSource(TempFile(data + 1, size - 1, ".pt"), {});
      // Every example it claims must be readable: the first and the last.
      source->Get({0, source->size() - 1});
      return 0;
    }
    const std::string path = TempFile(data + 1, size - 1, ".bin");
    auto array =
        which == 0 ? gpipe::ArrayFile::OpenNpy(path) : gpipe::ArrayFile::OpenTokens(path, 16);
    // Every row it claims must be readable: the first and the last.
    array->Rows({0, array->rows() - 1});
    if (array->rows() > 0) array->Elements(0, 1);
  } catch (const c10::Error&) {
    // A clear error is the expected answer to a bad file.
  }
  return 0;
}
