#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/filesystem.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <c10/util/Exception.h>

namespace gpipe {
namespace {

namespace fs = boost::filesystem;

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

}  // namespace

void CheckOutputPath(const std::string& path, const std::string& example_name,
                     const std::string& option) {
  const std::string named = option.empty() ? "'" + path + "'" : option + " '" + path + "'";
  fs::path target = fs::absolute(path);
  TORCH_CHECK(!fs::is_directory(target), option.empty() ? "output path" : option.c_str(), " '",
              path, "' is a directory; give a file name such as ", example_name);
  const fs::path directory = target.parent_path();
  TORCH_CHECK(fs::is_directory(directory), "cannot write ", named, ": directory '",
              directory.string(), "' does not exist");
  TORCH_CHECK(::access(directory.c_str(), W_OK | X_OK) == 0, "cannot write ", named,
              ": directory '", directory.string(), "' is not writable (", std::strerror(errno),
              "); write elsewhere");
  boost::system::error_code error;
  const fs::file_status status = fs::symlink_status(target, error);
  TORCH_CHECK(!fs::exists(status) || fs::is_regular_file(status), named,
              " exists and is not a regular file (a device, pipe, socket or symbolic link), "
              "which writing would replace; give the name of a regular file, such as ",
              example_name);
}

void WriteFileAtomically(const std::string& path, const std::string& example_name,
                         const std::function<void(std::ostream& out, int& write_errno)>& write,
                         const std::function<void()>& before_rename) {
  CheckOutputPath(path, example_name);
  fs::path target = fs::absolute(path);
  RemoveStaleTempFiles(target);
  const std::string temp = TempNameFor(target);
  // Out of space, over a size limit, not allowed: one line with the fix that
  // fits, old file kept.
  auto refuse = [&](int error) {
    const char* fix = error == ENOSPC  ? "free some space, or write elsewhere"
                      : error == EFBIG ? "the file-size limit (ulimit -f) is lower than the file; "
                                         "raise it, or write elsewhere"
                      : error == EACCES || error == EPERM || error == EROFS
                          ? "make the directory writable, or write elsewhere"
                          : "write elsewhere";
    TORCH_CHECK(false, "writing '", path, "' failed (", std::strerror(error), "); any earlier '",
                path, "' is left as it was: ", fix);
  };
  try {
    int write_errno = 0;
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      if (!out) refuse(errno);
      try {
        write(out, write_errno);
        out.flush();
        if (!out && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
      } catch (const c10::Error&) {
        if (write_errno == 0) throw;  // the writer failed for its own reason
      }
    }
    if (write_errno != 0) refuse(write_errno);
    if (int error = FsyncFile(temp)) refuse(error);
    if (before_rename) before_rename();
    fs::rename(temp, target);
  } catch (...) {
    boost::system::error_code ignored;
    fs::remove(temp, ignored);
    throw;
  }
}

}  // namespace gpipe
