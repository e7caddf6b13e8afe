#include "runtime/artifact.h"

#include <fcntl.h>
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

#include "runtime/checksum.h"

namespace gpipe {
namespace {

namespace fs = boost::filesystem;

std::atomic<ArtifactWriteFailpoint> failpoint{ArtifactWriteFailpoint::kNone};

// 0 on success, else errno.
int FsyncFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  int rc = ::fsync(fd);
  const int error = rc == 0 ? 0 : errno;
  ::close(fd);
  return error;
}

std::string TempPrefixFor(const fs::path& target) {
  return "." + target.filename().string() + ".tmp.";
}

std::string TempNameFor(const fs::path& target) {
  return (target.parent_path() / (TempPrefixFor(target) + std::to_string(::getpid()))).string();
}

// A writer killed mid-save leaves its temporary file behind; the next save
// of the same target removes those of processes that no longer run.
void RemoveStaleTempFiles(const fs::path& target) {
  const std::string prefix = TempPrefixFor(target);
  boost::system::error_code error;
  for (fs::directory_iterator it(target.parent_path(), error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      boost::system::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

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
  fs::path target = fs::absolute(path);
  TORCH_CHECK(!fs::is_directory(target), "output path '", path,
              "' is a directory; give a file name such as model.gpipe");
  TORCH_CHECK(fs::is_directory(target.parent_path()), "cannot write '", path, "': directory '",
              target.parent_path().string(), "' does not exist");
  RemoveStaleTempFiles(target);
  const std::string temp = TempNameFor(target);
  // Out of space (ENOSPC), over a size limit (EFBIG): one line, old file kept.
  auto refuse = [&](int error) {
    TORCH_CHECK(false, "writing '", path, "' failed (", std::strerror(error), "); any earlier '",
                path, "' is left as it was: free some space, or write elsewhere");
  };
  try {
    int write_errno = 0;
    try {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      if (!out) refuse(errno);
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
      out.flush();
      if (!out && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
    } catch (const c10::Error&) {
      if (write_errno == 0) throw;  // LibTorch's writer failed for its own reason
    }
    if (write_errno != 0) refuse(write_errno);
    if (int error = FsyncFile(temp)) refuse(error);
    TORCH_CHECK(failpoint != ArtifactWriteFailpoint::kThrowBeforeRename,
                "failpoint: stopped between write and rename");
    fs::rename(temp, target);
  } catch (...) {
    boost::system::error_code ignored;
    fs::remove(temp, ignored);
    throw;
  }
}

ArtifactReader::ArtifactReader(const std::string& path) : path_(path) {
  TORCH_CHECK(fs::exists(path), "artifact '", path, "' does not exist; create it with "
              "gpipe-compile MODEL.pt -o ", path);
  TORCH_CHECK(fs::is_regular_file(path), "artifact '", path, "' is not a regular file");
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
