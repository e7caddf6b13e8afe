// gpipe-export: the way back to PyTorch. Writes the model an artifact was
// compiled from with the artifact's (trained) weights, and/or its state dict.

#include <cstdio>

#include <torch/script.h>
#include <boost/filesystem.hpp>
#include <boost/program_options.hpp>

#include "cli/cli_main.h"
#include "runtime/atomic_file.h"
#include "runtime/model_export.h"

namespace po = boost::program_options;

namespace {

double MiB(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  double bytes = 0;
  for (const auto& [name, t] : tensors) bytes += static_cast<double>(t.numel() * t.element_size());
  return bytes / (1 << 20);
}

bool SamePath(const std::string& a, const std::string& b) {
  namespace fs = boost::filesystem;
  return fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
}

int Main(int argc, char** argv) {
  std::string artifact, output, state_dict, model;
  po::options_description opts(
      "Usage: gpipe-export TRAINED.gpipe -o model.pt [--state-dict weights.safetensors]\n"
      "Writes the model the artifact was compiled from, with the artifact's weights (e.g.\n"
      "trained by gpipe-run --save), as a TorchScript file that torch.jit.load (Python)\n"
      "and torch::jit::load (C++) open; and/or its parameters and buffers under the\n"
      "original model's names, for load_state_dict of the module it was exported from.\n"
      "Every buffer is written, also those registered with persistent=False (TorchScript\n"
      "does not keep that flag): load such a module's state dict with strict=False.\n\n"
      "Options");
  // clang-format off
  opts.add_options()
      ("help,h", "print this help and exit")
      ("artifact", po::value(&artifact), "artifact written by gpipe-compile or gpipe-run --save (positional)")
      ("output,o", po::value(&output), "write the whole model here (TorchScript, e.g. model.pt)")
      ("state-dict", po::value(&state_dict), "write the state dict here: NAME.safetensors (Hugging Face's "
       "safetensors) or NAME.pt (torch.save; torch.load(..., weights_only=True) reads it)")
      ("model", po::value(&model), "the TorchScript file the artifact was compiled from; needed only "
       "for artifacts compiled before gpipe-compile kept it");
  // clang-format on
  po::variables_map vm;
  if (!gpipe::ParseCommandLine(argc, argv, opts, "artifact", vm)) return 0;
  if (artifact.empty()) throw po::error("the artifact file is missing");
  if (output.empty() && state_dict.empty()) {
    throw po::error(
        "nothing to write: give -o model.pt, --state-dict weights.safetensors, or both");
  }
  for (const std::string* path : {&output, &state_dict}) {
    TORCH_CHECK(path->empty() || !SamePath(*path, artifact), "'", *path,
                "' is the artifact itself; write the export elsewhere");
  }
  TORCH_CHECK(output.empty() || state_dict.empty() || !SamePath(output, state_dict),
              "-o and --state-dict both name '", output, "'; give them different files");

  torch::jit::Module exported = gpipe::ExportModel(
      artifact, model.empty() ? std::nullopt : std::optional<std::string>(model));
  const auto tensors = gpipe::StateDictOf(exported);
  if (!output.empty()) {
    gpipe::WriteFileAtomically(output, "model.pt",
                               [&](std::ostream& out, int&) { exported.save(out); });
    std::printf("wrote %s: the source model with %zu trained tensors (%.1f MiB)\n", output.c_str(),
                tensors.size(), MiB(tensors));
  }
  if (!state_dict.empty()) {
    gpipe::WriteStateDict(state_dict, tensors);
    std::printf("wrote %s: state dict of %zu tensors (%.1f MiB)\n", state_dict.c_str(),
                tensors.size(), MiB(tensors));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpipe::RunCli("gpipe-export", [&] { return Main(argc, argv); });
}
