#include "runtime/checkpoint_mode.h"

#include <c10/util/Exception.h>

namespace gpipe {

CheckpointMode ParseCheckpointMode(const std::string& text) {
  if (text == "never") return CheckpointMode::Never;
  if (text == "except_last") return CheckpointMode::ExceptLast;
  if (text == "always") return CheckpointMode::Always;
  if (text == "selective") return CheckpointMode::Selective;
  if (text == "budget") return CheckpointMode::Budget;
  TORCH_CHECK(false, "unknown checkpoint mode '", text,
              "'; use one of: always, budget, except_last, never, selective");
}

std::string ToString(CheckpointMode mode) {
  switch (mode) {
    case CheckpointMode::Never: return "never";
    case CheckpointMode::ExceptLast: return "except_last";
    case CheckpointMode::Always: return "always";
    case CheckpointMode::Selective:
      return "selective";
    case CheckpointMode::Budget:
      return "budget";
  }
  TORCH_INTERNAL_ASSERT(false);
}

bool IsCheckpointed(CheckpointMode mode, size_t micro_batch) {
  switch (mode) {
    case CheckpointMode::Never: return false;
    case CheckpointMode::ExceptLast:
      return micro_batch != 0;
    case CheckpointMode::Always: return true;
    case CheckpointMode::Selective:
    case CheckpointMode::Budget:
      return true;
  }
  TORCH_INTERNAL_ASSERT(false);
}

bool RunsRecomputePlan(CheckpointMode mode) {
  return mode == CheckpointMode::Selective || mode == CheckpointMode::Budget;
}

}  // namespace gpipe
