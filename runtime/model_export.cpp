#include "runtime/model_export.h"

#include <boost/filesystem.hpp>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <nlohmann/json.hpp>

#include "runtime/artifact.h"
#include "runtime/atomic_file.h"
#include "runtime/recompute.h"
#include "runtime/stage.h"

namespace gpipe {
namespace {

torch::jit::Module LoadOnCpu(std::istream& bytes, const std::string& what) {
  try {
    return torch::jit::load(bytes, at::kCPU);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, what, " is not a loadable TorchScript module: ", e.what_without_backtrace());
  }
}

// safetensors' names of the dtypes it stores.
std::optional<std::string> SafetensorsDtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "F32";
    case at::kDouble:
      return "F64";
    case at::kHalf:
      return "F16";
    case at::kBFloat16:
      return "BF16";
    case at::kLong:
      return "I64";
    case at::kInt:
      return "I32";
    case at::kShort:
      return "I16";
    case at::kChar:
      return "I8";
    case at::kByte:
      return "U8";
    case at::kBool:
      return "BOOL";
    default:
      return std::nullopt;
  }
}

// The safetensors layout: an 8-byte little-endian header size, the JSON
// header (name -> dtype, shape, [begin, end) in the data), padded with
// spaces to 8 bytes, then each tensor's bytes, back to back.
void WriteSafetensors(std::ostream& out, int& write_errno,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::string& path) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const std::optional<std::string> dtype = SafetensorsDtype(tensor.scalar_type());
    TORCH_CHECK(dtype, "cannot write '", name, "' to ", path, ": safetensors has no ",
                tensor.scalar_type(), " type; write a .pt state dict instead");
    at::Tensor contiguous = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = contiguous.numel() * contiguous.element_size();
    header[name] = {{"dtype", *dtype},
                    {"shape", contiguous.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(contiguous);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t size = text.size();
  unsigned char size_bytes[8];
  for (int k = 0; k < 8; ++k) size_bytes[k] = static_cast<unsigned char>(size >> (8 * k));
  out.write(reinterpret_cast<const char*>(size_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const at::Tensor& t : data) {
    out.write(static_cast<const char*>(t.data_ptr()),
              static_cast<std::streamsize>(t.numel() * t.element_size()));
  }
  if (!out && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
}

}  // namespace

torch::jit::Module ExportModel(const std::string& artifact_path,
                               const std::optional<std::string>& source_model_path) {
  // Stage records call gpipe:: ops; naming one links their library in.
  (void)is_recomputing();
  ArtifactReader reader(artifact_path);
  const Manifest& manifest = reader.manifest();
  torch::jit::Module model;
  std::string source;
  if (source_model_path) {
    TORCH_CHECK(boost::filesystem::is_regular_file(*source_model_path), "source model '",
                *source_model_path,
                "' does not exist or is not a file; give the TorchScript "
                "file the artifact was compiled from");
    source = "source model '" + *source_model_path + "'";
    std::ifstream bytes(*source_model_path, std::ios::binary);
    model = LoadOnCpu(bytes, source);
  } else {
    TORCH_CHECK(reader.HasRecord(kSourceModelRecord), "artifact '", artifact_path,
                "' does not keep the model it was compiled from (compiled before gpipe-compile "
                "kept it); give that model with --model ",
                manifest.source_model.empty() ? "MODEL.pt" : manifest.source_model,
                ", or compile it again");
    source = "the source model kept in '" + artifact_path + "'";
    std::istringstream bytes(reader.ReadRecord(kSourceModelRecord));
    model = LoadOnCpu(bytes, source);
  }
  // Every tensor the source model holds, by dotted name; tied weights share one.
  std::map<std::string, at::Tensor> targets;
  for (const auto& attribute : model.named_attributes(/*recurse=*/true)) {
    if (attribute.value.isTensor()) targets.emplace(attribute.name, attribute.value.toTensor());
  }
  at::NoGradGuard no_grad;
  for (size_t s = 0; s < manifest.stages.size(); ++s) {
    const StageEntry& entry = manifest.stages[s];
    const torch::jit::Module stage = LoadStageModule(reader, artifact_path, s, at::kCPU);
    for (const ParameterEntry& p : entry.parameters) {
      TORCH_CHECK(stage.attr(p.name).isTensor(), "artifact '", artifact_path, "': stage ", s,
                  " holds '", p.name, "' (", p.original, ") as no tensor; compile the model again");
      const at::Tensor trained = stage.attr(p.name).toTensor();
      auto target = targets.find(p.original);
      TORCH_CHECK(target != targets.end(), source, " has no parameter or buffer '", p.original,
                  "' that stage ", s,
                  " holds: it is not the model this artifact was compiled "
                  "from; give that one with --model");
      TORCH_CHECK(target->second.sizes() == trained.sizes(), "'", p.original, "' has shape ",
                  target->second.sizes(), " in ", source, " but ", trained.sizes(), " in stage ", s,
                  ": it is not the model this artifact was compiled from; give that one with "
                  "--model");
      target->second.copy_(trained);  // in place: ties and the module's own dtype are kept
    }
  }
  return model;
}

std::vector<std::pair<std::string, at::Tensor>> StateDictOf(const torch::jit::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    tensors.emplace_back(p.name, p.value);
  for (const auto& b : module.named_buffers(/*recurse=*/true))
    tensors.emplace_back(b.name, b.value);
  return tensors;
}

void WriteStateDict(const std::string& path,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  const std::string extension = boost::filesystem::path(path).extension().string();
  if (extension == ".safetensors") {
    WriteFileAtomically(path, "weights.safetensors", [&](std::ostream& out, int& write_errno) {
      WriteSafetensors(out, write_errno, tensors, path);
    });
    return;
  }
  TORCH_CHECK(extension == ".pt" || extension == ".pth" || extension == ".bin", "state dict '",
              path,
              "' has neither the .safetensors nor the .pt extension; name it "
              "weights.safetensors (Hugging Face's safetensors) or weights.pt (torch.save)");
  // torch.save's zip layout, as torch::jit::pickle_save writes it, but
  // without its TorchScript type tags, which torch.load(weights_only=True)
  // refuses: LibTorch's Pickler with tag_aggregates off.
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, tensor] : tensors) dict.insert(name, tensor.detach().to(at::kCPU));
  std::string pickle;
  torch::jit::Pickler pickler([&](const char* data, size_t n) { pickle.append(data, n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                              /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  WriteFileAtomically(path, "weights.pt", [&](std::ostream& out, int& write_errno) {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) -> size_t {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
      if (!out && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                       writer);
    writer.writeEndOfFile();
  });
}

}  // namespace gpipe
