#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/script.h>

namespace gpipe {

// The way back to PyTorch. gpipe-compile keeps the TorchScript file it
// compiled, byte for byte, as the artifact's `source_model.pt` record, and
// Pipeline::save carries it into every checkpoint. Exporting loads that
// module and writes every parameter and buffer the stages hold into it, in
// place, by the original dotted names the manifest records: the result is
// the user's own module (its code, methods and weight ties intact) with
// the trained values, which torch.jit.load and torch::jit::load open.
constexpr const char* kSourceModelRecord = "source_model.pt";

// The source model of the artifact at `artifact_path` with the artifact's
// parameters and buffers. `source_model_path` supplies the source model of
// an artifact compiled before it was kept (else that is an error naming the
// fix); given for an artifact that keeps one, it is used instead. A name or
// shape the source model does not have is an error: it is not the model the
// artifact was compiled from.
torch::jit::Module ExportModel(const std::string& artifact_path,
                               const std::optional<std::string>& source_model_path = std::nullopt);

// What `state_dict()` of the module returns in Python: every parameter and
// buffer under its dotted name, submodules' included, in the module's
// order. Weights tied by sharing one tensor appear under each name.
std::vector<std::pair<std::string, at::Tensor>> StateDictOf(const torch::jit::Module& module);

// Writes `tensors` atomically as a safetensors file (path ending in
// `.safetensors`: the Hugging Face format `safetensors.torch.load_file`
// reads) or a `torch.save` file (`.pt`, `.pth`, `.bin`: a dict that
// `torch.load(..., weights_only=True)` reads). Anything else is an error
// naming the extensions. Tensors are written contiguous, on the CPU.
void WriteStateDict(const std::string& path,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors);

}  // namespace gpipe
