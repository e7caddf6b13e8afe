// libFuzzer target: any bytes as a .npy file, a token file, the training
// state a checkpoint carries (--resume), or a .pt data file (torch.save). Each reader must either
// return something consistent with the file (rows that can all be read) or throw c10::Error; never
// crash, over-read, hang or trip a sanitizer. The first byte picks the reader; the rest is the
// file.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include <c10/util/Exception.h>

#include "runtime/array_file.h"
#include "runtime/data_source.h"
#include "runtime/training_state.h"

// LibTorch's unpickler allocates what a damaged pickle's length claims
// before it reads (pytorch/pytorch#185443). Without sanitizers a claim past
// the machine's memory fails as std::bad_alloc, which the readers turn into
// their clear error; ASan's operator new aborts instead. This operator new
// (malloc underneath, so ASan still checks every access) fails such a claim
// as glibc would, so the fuzzer goes on past it.
constexpr size_t kMostOneAllocation = size_t{8} << 30;

void* operator new(size_t size) {
  void* p = size <= kMostOneAllocation ? std::malloc(size == 0 ? 1 : size) : nullptr;
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  return size <= kMostOneAllocation ? std::malloc(size == 0 ? 1 : size) : nullptr;
}
void* operator new[](size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

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
