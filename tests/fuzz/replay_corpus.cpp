// Runs a libFuzzer target over the inputs kept in the repo, without libFuzzer:
//   fuzz_replay_TARGET DIR...
// CTest runs each target over its corpus (seeds and every finding) with the
// project's own compiler and LibTorch, so the targets keep compiling as the
// runtime changes (the manifest target once stopped linking unnoticed) and a
// finding that comes back fails the suite, under the sanitizer builds too.
// The target's own checks (__builtin_trap, a sanitizer report) are the failure;
// an empty or missing directory is one too, so the test cannot pass vacuously.

#include <boost/filesystem.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = boost::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    boost::system::error_code error;
    std::vector<fs::path> inputs;
    for (fs::directory_iterator it(argv[i], error), end; !error && it != end; it.increment(error)) {
      if (fs::is_regular_file(it->path())) inputs.push_back(it->path());
    }
    if (error || inputs.empty()) {
      std::fprintf(stderr, "%s: no inputs in '%s'%s%s\n", argv[0], argv[i], error ? ": " : "",
                   error ? error.message().c_str() : "");
      return 1;
    }
    for (const fs::path& input : inputs) {
      std::ifstream in(input.string(), std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("replayed %zu inputs from %s\n", inputs.size(), argv[i]);
  }
  return 0;
}
