#include "runtime/artifact.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <boost/filesystem.hpp>
#include <fstream>

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

namespace gpipe {
namespace {

namespace fs = boost::filesystem;

std::atomic<bool> fail_before_rename{false};

void FsyncFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  TORCH_CHECK(fd >= 0, "cannot reopen '", path, "' to flush it to disk");
  int rc = ::fsync(fd);
  ::close(fd);
  TORCH_CHECK(rc == 0, "flushing '", path, "' to disk failed");
}

std::string TempNameFor(const fs::path& target) {
  return (target.parent_path() / ("." + target.filename().string() + ".tmp." +
                                  std::to_string(::getpid())))
      .string();
}

}  // namespace

void SetArtifactWriteFailpointForTesting(bool enabled) { fail_before_rename = enabled; }

void WriteArtifact(const std::string& path, const Manifest& manifest,
                   const std::vector<ArtifactRecord>& records) {
  ValidateManifest(manifest);
  fs::path target = fs::absolute(path);
  TORCH_CHECK(!fs::is_directory(target), "output path '", path,
              "' is a directory; give a file name such as model.gpipe");
  TORCH_CHECK(fs::is_directory(target.parent_path()), "cannot write '", path, "': directory '",
              target.parent_path().string(), "' does not exist");
  const std::string temp = TempNameFor(target);
  try {
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      TORCH_CHECK(out, "cannot create '", temp, "' (check permissions and free space)");
      caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) -> size_t {
        out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
        return out ? n : 0;
      });
      std::string json = ManifestToJson(manifest);
      writer.writeRecord(kManifestRecord, json.data(), json.size());
      for (const auto& r : records) writer.writeRecord(r.name, r.bytes.data(), r.bytes.size());
      writer.writeEndOfFile();
      out.flush();
      TORCH_CHECK(out, "writing '", temp, "' failed (disk full?)");
    }
    FsyncFile(temp);
    TORCH_CHECK(!fail_before_rename, "failpoint: stopped between write and rename");
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
  try {
    manifest_ = ParseManifest(ReadRecord(kManifestRecord));
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
