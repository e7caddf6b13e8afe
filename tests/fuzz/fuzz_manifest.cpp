// libFuzzer target: any bytes as manifest.json. ParseManifest must either
// return a manifest that passes ValidateManifest and serialises again, or throw
// c10::Error; never crash, hang or trip a sanitizer.

#include <cstddef>
#include <cstdint>
#include <string>

#include <c10/util/Exception.h>

#include "runtime/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    gpipe::Manifest m = gpipe::ParseManifest(text);
    gpipe::ValidateManifest(m);
    gpipe::Manifest again = gpipe::ParseManifest(gpipe::ManifestToJson(m));  // round trip
    if (gpipe::ManifestToJson(again) != gpipe::ManifestToJson(m)) __builtin_trap();
  } catch (const c10::Error&) {
    // A clear error is the expected answer to a bad manifest.
  }
  return 0;
}
