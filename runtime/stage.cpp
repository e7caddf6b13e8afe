#include "runtime/stage.h"

#include <optional>

#include <torch/cuda.h>

namespace gpipe {

std::vector<c10::IValue> Stage::Run(std::vector<c10::IValue> inputs) {
  for (int64_t k : mutated_inputs) {
    auto& v = inputs.at(static_cast<size_t>(k));
    if (v.isTensor() && v.toTensor().defined()) v = v.toTensor().clone();
  }
  c10::IValue out = module.forward(std::move(inputs));
  TORCH_INTERNAL_ASSERT(out.isTuple(), "stage ", index, " must return a tuple");
  auto elements = out.toTupleRef().elements().vec();
  TORCH_CHECK(static_cast<int64_t>(elements.size()) == num_outputs, "stage ", index, " returned ",
              elements.size(), " values but the manifest says ", num_outputs,
              "; the artifact is inconsistent, compile it again");
  return elements;
}

c10::Device ParseDevice(const std::string& text) {
  std::optional<c10::Device> device;
  try {
    device = c10::Device(text);
  } catch (const c10::Error&) {
    TORCH_CHECK(false, "'", text, "' is not a device; use cpu, cuda or cuda:N");
  }
  TORCH_CHECK(device->is_cpu() || device->is_cuda(), "device '", text,
              "' is not supported; use cpu, cuda or cuda:N");
  if (device->is_cuda()) {
    TORCH_CHECK(torch::cuda::is_available(), "device '", text,
                "' needs CUDA, but this gpipe-cpp build or machine has none; use cpu");
    int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    TORCH_CHECK(!device->has_index() || device->index() < count, "device '", text,
                "' does not exist: this machine has ", count, " CUDA device(s)");
  }
  return *device;
}

}  // namespace gpipe
