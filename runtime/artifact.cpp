#include "runtime/artifact.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <boost/filesystem.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include "runtime/atomic_file.h"
#include "runtime/checksum.h"

namespace gpipe {
namespace {

namespace fs = boost::filesystem;

std::atomic<ArtifactWriteFailpoint> failpoint{ArtifactWriteFailpoint::kNone};

constexpr char kChecksumsHeader[] = "gpipe-checksums crc32";

void AppendChecksum(std::string& text, const std::string& name, const std::string& bytes) {
  char line[32];
  std::snprintf(line, sizeof line, " %08x %zu\n", Crc32(bytes.data(), bytes.size()), bytes.size());
  text += name + line;
}

}  // namespace

void SetArtifactWriteFailpointForTesting(ArtifactWriteFailpoint point) { failpoint = point; }

void WriteArtifact(const std::string& path, const Manifest& manifest,
                   const std::vector<ArtifactRecord>& records) {
  ValidateManifest(manifest);
  auto write = [&](std::ostream& out, int& write_errno) {
    // A short write is remembered, not reported: LibTorch's writer would
    // throw, and throw again from its destructor (std::terminate).
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) -> size_t {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
      if (!out && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
      return n;
    });
    std::string json = ManifestToJson(manifest);
    std::string checksums = std::string(kChecksumsHeader) + "\n";
    AppendChecksum(checksums, kManifestRecord, json);
    writer.writeRecord(kManifestRecord, json.data(), json.size());
    if (failpoint == ArtifactWriteFailpoint::kKillMidWrite) {
      out.flush();
      ::raise(SIGKILL);
    }
    for (const auto& r : records) {
      writer.writeRecord(r.name, r.bytes.data(), r.bytes.size());
      AppendChecksum(checksums, r.name, r.bytes);
    }
    writer.writeRecord(kChecksumsRecord, checksums.data(), checksums.size());
    writer.writeEndOfFile();
  };
  WriteFileAtomically(path, "model.gpipe", write, [] {
    TORCH_CHECK(failpoint != ArtifactWriteFailpoint::kThrowBeforeRename,
                "failpoint: stopped between write and rename");
  });
}

ArtifactReader::ArtifactReader(const std::string& path) : path_(path) {
  TORCH_CHECK(fs::exists(path), "artifact '", path, "' does not exist; create it with "
              "gpipe-compile MODEL.pt -o ", path);
  TORCH_CHECK(fs::is_regular_file(path), "artifact '", path, "' is not a regular file");
  // Before the zip reader, whose failure to open says only "not a zip archive".
  TORCH_CHECK(::access(path.c_str(), R_OK) == 0, "cannot read artifact '", path, "' (",
              std::strerror(errno), "); check its permissions");
  try {
    reader_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "'", path, "' is not a gpipe artifact (not a readable zip archive: ",
                e.what_without_backtrace(), "); create it with gpipe-compile");
  }
  TORCH_CHECK(reader_->hasRecord(kManifestRecord), "'", path,
              "' has no manifest.json, so it is not a gpipe artifact (a TorchScript model? "
              "compile it first with gpipe-compile)");
  if (reader_->hasRecord(kChecksumsRecord)) {
    std::istringstream lines(ReadUnchecked(kChecksumsRecord));
    std::string line;
    bool readable = std::getline(lines, line) && line == kChecksumsHeader;
    checksums_.emplace();
    while (readable && std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string name, crc_text;
      RecordChecksum checksum;
      readable = (fields >> name >> crc_text >> checksum.bytes) && crc_text.size() == 8 &&
                 crc_text.find_first_not_of("0123456789abcdef") == std::string::npos;
      if (readable) checksum.crc32 = static_cast<uint32_t>(std::stoul(crc_text, nullptr, 16));
      readable = readable && checksums_->emplace(name, checksum).second;
    }
    TORCH_CHECK(readable, "artifact '", path,
                "' is damaged: its checksums record is unreadable; write it again with "
                "gpipe-compile, or resume from an earlier checkpoint");
  }
  const std::string manifest_json = ReadRecord(kManifestRecord);  // its own error if damaged
  try {
    manifest_ = ParseManifest(manifest_json);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "artifact '", path, "': ", e.what_without_backtrace());
  }
  for (size_t s = 0; s < manifest_.stages.size(); ++s) {
    TORCH_CHECK(reader_->hasRecord(manifest_.stages[s].file), "artifact '", path, "': stage ", s,
                " names the file '", manifest_.stages[s].file,
                "', which the archive does not contain; the artifact is damaged, compile it again");
  }
}

ArtifactReader::~ArtifactReader() = default;

bool ArtifactReader::HasRecord(const std::string& name) const { return reader_->hasRecord(name); }

std::string ArtifactReader::ReadRecord(const std::string& name) const {
  std::string bytes = ReadUnchecked(name);
  if (!checksums_) return bytes;
  auto it = checksums_->find(name);
  const bool intact = it != checksums_->end() && it->second.bytes == bytes.size() &&
                      it->second.crc32 == Crc32(bytes.data(), bytes.size());
  TORCH_CHECK(intact, "artifact '", path_, "' is damaged: its record '", name,
              "' does not match the checksum written with it (the file changed after it was "
              "saved); write it again with gpipe-compile, or resume from an earlier checkpoint");
  return bytes;
}

std::string ArtifactReader::ReadUnchecked(const std::string& name) const {
  TORCH_CHECK(reader_->hasRecord(name), "artifact '", path_, "' has no record '", name, "'");
  at::DataPtr data;
  size_t size = 0;
  try {
    std::tie(data, size) = reader_->getRecord(name);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "artifact '", path_, "': reading '", name, "' failed (",
                e.what_without_backtrace(), "); the file is damaged, compile it again");
  }
  return std::string(static_cast<const char*>(data.get()), size);
}

}  // namespace gpipe
