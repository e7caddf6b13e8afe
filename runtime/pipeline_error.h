#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace gpipe {

// A failure inside one (stage, micro-batch) task, carried to the caller of
// forward/backward after every worker has gone idle.
class PipelineError : public std::runtime_error {
 public:
  PipelineError(size_t stage, size_t micro_batch, const std::string& phase, const std::exception& cause);
  size_t stage() const { return stage_; }
  size_t micro_batch() const { return micro_batch_; }

 private:
  size_t stage_;
  size_t micro_batch_;
};

// The message of an exception without LibTorch's C++ backtrace.
std::string ErrorMessage(const std::exception& e);

}  // namespace gpipe
