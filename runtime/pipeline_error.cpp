#include "runtime/pipeline_error.h"

#include <boost/filesystem.hpp>

#include <c10/util/Exception.h>

namespace gpipe {

std::string ErrorMessage(const std::exception& e) {
  // Boost.Filesystem's own words ("boost::filesystem::status: Permission
  // denied [system:13]: \"d\"") name its function; ours name the path.
  if (auto* fs_error = dynamic_cast<const boost::filesystem::filesystem_error*>(&e)) {
    std::string paths = "'" + fs_error->path1().string() + "'";
    if (!fs_error->path2().empty()) paths += " or '" + fs_error->path2().string() + "'";
    return "cannot access " + paths + " (" + fs_error->code().message() +
           "); check the path and its permissions";
  }
  std::string message = e.what();
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) message = c10_error->what_without_backtrace();
  // torch::data's DataLoader rethrows a reader's error as a runtime_error
  // with a preamble and LibTorch's backtrace: keep the reader's words.
  const std::string loader = "Caught exception in DataLoader worker thread. Original message: ";
  if (message.rfind(loader, 0) == 0) {
    message = message.substr(loader.size());
    message = message.substr(0, message.find("\nException raised from "));
  }
  // The TorchScript interpreter's 20-line traceback ends in the error itself
  // ("RuntimeError: mat1 and mat2 shapes cannot be multiplied ..."): keep that.
  if (message.find("Traceback of TorchScript") != std::string::npos) {
    size_t end = message.find_last_not_of(" \n");
    size_t start = message.rfind('\n', end);
    if (end != std::string::npos) message = message.substr(start == std::string::npos ? 0 : start + 1, end - start);
  }
  return message;
}

PipelineError::PipelineError(size_t stage, size_t micro_batch, const std::string& phase,
                             const std::exception& cause)
    : std::runtime_error("stage " + std::to_string(stage) + ", micro-batch " +
                         std::to_string(micro_batch) + " (" + phase + "): " + ErrorMessage(cause)),
      stage_(stage),
      micro_batch_(micro_batch) {}

}  // namespace gpipe
