#include "runtime/pipeline_error.h"

#include <c10/util/Exception.h>

namespace gpipe {

std::string ErrorMessage(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

PipelineError::PipelineError(size_t stage, size_t micro_batch, const std::string& phase,
                             const std::exception& cause)
    : std::runtime_error("stage " + std::to_string(stage) + ", micro-batch " +
                         std::to_string(micro_batch) + " (" + phase + "): " + ErrorMessage(cause)),
      stage_(stage),
      micro_batch_(micro_batch) {}

}  // namespace gpipe
