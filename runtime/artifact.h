#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/manifest.h"

namespace caffe2 {
namespace serialize {
class PyTorchStreamReader;
}
}  // namespace caffe2

namespace gpipe {

// A pipelined artifact is one zip archive, written with LibTorch's own
// PyTorchStreamWriter: `manifest.json` plus one record per stage module
// (each itself a TorchScript archive), and last `checksums`, one line per
// record: "NAME CRC32 BYTES". One file means one atomic rename. LibTorch's
// zip reader does not check the zip's own CRCs, so without `checksums` a
// flipped bit in a weight would load as a different model; artifacts from
// before it (no such record) are read unchecked.
constexpr const char* kManifestRecord = "manifest.json";
constexpr const char* kChecksumsRecord = "checksums";

struct ArtifactRecord {
  std::string name;
  std::string bytes;
};

// Writes manifest + records to `path` atomically: a temporary file in the same
// directory, flushed to disk, then renamed over `path`. On any failure the
// temporary is removed and a previous `path` is left untouched.
void WriteArtifact(const std::string& path, const Manifest& manifest,
                   const std::vector<ArtifactRecord>& records);

// Opens an artifact and parses its manifest; stage records are read on demand.
class ArtifactReader {
 public:
  explicit ArtifactReader(const std::string& path);
  ~ArtifactReader();
  const Manifest& manifest() const { return manifest_; }
  // The record's bytes, checked against `checksums`; a clear error if it is
  // missing or damaged.
  std::string ReadRecord(const std::string& name) const;
  bool HasRecord(const std::string& name) const;

 private:
  struct RecordChecksum {
    uint32_t crc32 = 0;
    size_t bytes = 0;
  };
  std::string ReadUnchecked(const std::string& name) const;

  std::string path_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader_;
  std::optional<std::map<std::string, RecordChecksum>> checksums_;  // none: an older artifact
  Manifest manifest_;
};

// Test hooks for what a crash while saving leaves behind: kThrowBeforeRename
// throws after the temporary file is written and before the rename;
// kKillMidWrite kills the process (SIGKILL) with the temporary file half
// written, as a power cut or the OOM killer would.
enum class ArtifactWriteFailpoint { kNone, kThrowBeforeRename, kKillMidWrite };
void SetArtifactWriteFailpointForTesting(ArtifactWriteFailpoint failpoint);

}  // namespace gpipe
