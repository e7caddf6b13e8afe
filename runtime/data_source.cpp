#include "runtime/data_source.h"

#include <algorithm>
#include <boost/crc.hpp>
#include <boost/filesystem.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "runtime/array_file.h"
#include "runtime/checked_load.h"
#include "runtime/model_interface.h"

namespace gpipe {
namespace {

std::string ShapeText(at::IntArrayRef sizes) {
  std::ostringstream text;
  text << sizes;
  return text.str();
}

std::string Describe(
    int64_t size, const std::vector<std::pair<std::vector<int64_t>, c10::ScalarType>>& inputs,
    const std::optional<std::pair<std::vector<int64_t>, c10::ScalarType>>& targets) {
  std::string text = std::to_string(size) + " examples; inputs";
  for (const auto& [shape, dtype] : inputs) text += " " + ShapeText(shape) + " " + DtypeName(dtype);
  text += targets ? "; targets " + ShapeText(targets->first) + " " + DtypeName(targets->second)
                  : "; no targets";
  return text;
}

// inputs.npy / inputs_K.npy and targets.npy in a directory.
class NpyDirectory : public DataSource {
 public:
  explicit NpyDirectory(const std::string& dir) {
    namespace fs = boost::filesystem;
    if (fs::exists(fs::path(dir) / "inputs.npy")) {
      inputs_.push_back(ArrayFile::OpenNpy((fs::path(dir) / "inputs.npy").string()));
    }
    for (int k = 0; fs::exists(fs::path(dir) / ("inputs_" + std::to_string(k) + ".npy")); ++k) {
      TORCH_CHECK(inputs_.empty() || k > 0, "data directory '", dir,
                  "' has both inputs.npy and inputs_0.npy; keep one naming");
      inputs_.push_back(
          ArrayFile::OpenNpy((fs::path(dir) / ("inputs_" + std::to_string(k) + ".npy")).string()));
    }
    TORCH_CHECK(!inputs_.empty(), "data directory '", dir,
                "' has no inputs.npy (or inputs_0.npy, inputs_1.npy, ... for several inputs); "
                "write them with "
                "numpy.save");
    if (fs::exists(fs::path(dir) / "targets.npy"))
      targets_ = ArrayFile::OpenNpy((fs::path(dir) / "targets.npy").string());
    for (const auto& array : inputs_) CheckRows(*array);
    if (targets_) CheckRows(*targets_);
  }
  int64_t size() const override { return inputs_[0]->rows(); }
  DataBatch Get(const std::vector<int64_t>& indices) const override {
    DataBatch batch;
    for (const auto& array : inputs_) batch.inputs.push_back(array->Rows(indices));
    if (targets_) batch.targets = targets_->Rows(indices);
    return batch;
  }
  std::string Describe() const override {
    std::vector<std::pair<std::vector<int64_t>, c10::ScalarType>> inputs;
    for (const auto& a : inputs_) inputs.emplace_back(a->row_shape(), a->dtype());
    std::optional<std::pair<std::vector<int64_t>, c10::ScalarType>> targets;
    if (targets_) targets.emplace(targets_->row_shape(), targets_->dtype());
    return gpipe::Describe(size(), inputs, targets);
  }

 private:
  void CheckRows(const ArrayFile& array) const {
    TORCH_CHECK(array.rows() == inputs_[0]->rows(), "data file '", array.path(), "' has ",
                array.rows(), " rows but '", inputs_[0]->path(), "' has ", inputs_[0]->rows(),
                "; every array needs one row per example");
  }
  std::vector<std::shared_ptr<const ArrayFile>> inputs_;
  std::shared_ptr<const ArrayFile> targets_;
};

// torch.save({"inputs": X or [X0, X1, ...], "targets": Y}) from Python.
class SavedTensors : public DataSource {
 public:
  explicit SavedTensors(const std::string& path) {
    TORCH_CHECK(std::ifstream(path).good(), "cannot open data file '", path, "'");
    c10::IValue value;
    try {
      value = LoadTorchSaveFile(path);
    } catch (const std::exception& e) {
      auto* error = dynamic_cast<const c10::Error*>(&e);
      const std::string reason = error ? error->what_without_backtrace() : e.what();
      // LibTorch 1.13's unpickler has SETITEMS and APPENDS but not SETITEM
      // and APPEND, which Python writes for a dict of one entry ({"inputs":
      // X} alone) and a list of one element ("inputs": [X]).
      TORCH_CHECK(reason.find("Unknown opcode for unpickling at 0x73") == std::string::npos,
                  "data file '", path,
                  "' holds a dict of one entry, which this LibTorch cannot read (it lacks "
                  "pickle's SETITEM); give it a second entry: torch.save({\"inputs\": X, "
                  "\"targets\": None}, '",
                  path, "')");
      TORCH_CHECK(reason.find("Unknown opcode for unpickling at 0x61") == std::string::npos,
                  "data file '", path,
                  "' holds a list of one element, which this LibTorch cannot read (it lacks "
                  "pickle's APPEND); save the tensor itself: torch.save({\"inputs\": X, "
                  "\"targets\": Y}, '",
                  path, "')");
      TORCH_CHECK(false, "data file '", path,
                  "' is not a file torch.save wrote (or is damaged: ", reason,
                  "); write it with "
                  "torch.save({\"inputs\": X, \"targets\": Y}, '",
                  path, "')");
    }
    TORCH_CHECK(value.isGenericDict(), "data file '", path, "' holds a ", value.tagKind(),
                "; save a dict: torch.save({\"inputs\": X, \"targets\": Y}, ...)");
    auto dict = value.toGenericDict();
    auto get = [&](const char* key) -> std::optional<c10::IValue> {
      for (const auto& entry : dict) {
        if (entry.key().isString() && entry.key().toStringRef() == key) return entry.value();
      }
      return std::nullopt;
    };
    auto inputs = get("inputs");
    TORCH_CHECK(inputs, "data file '", path,
                "' has no \"inputs\" entry; save {\"inputs\": X, \"targets\": Y}");
    if (inputs->isTensor()) {
      inputs_.push_back(inputs->toTensor());
    } else if (inputs->isList() || inputs->isTuple()) {
      auto list =
          inputs->isList() ? inputs->toListRef().vec() : inputs->toTupleRef().elements().vec();
      for (const auto& v : list) {
        TORCH_CHECK(v.isTensor(), "data file '", path, "': \"inputs\" holds a ", v.tagKind(),
                    "; only tensors");
        inputs_.push_back(v.toTensor());
      }
    }
    TORCH_CHECK(!inputs_.empty(), "data file '", path,
                "': \"inputs\" must be a tensor or a list of tensors");
    if (auto targets = get("targets"); targets && !targets->isNone()) {
      TORCH_CHECK(targets->isTensor(), "data file '", path, "': \"targets\" holds a ",
                  targets->tagKind(), "; save a tensor");
      targets_ = targets->toTensor();
    }
    for (auto& t : inputs_) Check(path, t, "an input");
    if (targets_.defined()) Check(path, targets_, "\"targets\"");
  }
  int64_t size() const override { return inputs_[0].size(0); }
  DataBatch Get(const std::vector<int64_t>& indices) const override {
    at::Tensor index = at::tensor(indices, at::kLong);
    DataBatch batch;
    for (const auto& t : inputs_) batch.inputs.push_back(t.index_select(0, index));
    if (targets_.defined()) batch.targets = targets_.index_select(0, index);
    return batch;
  }
  std::string Describe() const override {
    std::vector<std::pair<std::vector<int64_t>, c10::ScalarType>> inputs;
    for (const auto& t : inputs_) inputs.emplace_back(t.sizes().slice(1).vec(), t.scalar_type());
    std::optional<std::pair<std::vector<int64_t>, c10::ScalarType>> targets;
    if (targets_.defined())
      targets.emplace(targets_.sizes().slice(1).vec(), targets_.scalar_type());
    return gpipe::Describe(size(), inputs, targets);
  }

 private:
  void Check(const std::string& path, at::Tensor& t, const char* what) {
    TORCH_CHECK(t.dim() >= 1 && t.size(0) == inputs_[0].size(0) && t.size(0) > 0, "data file '",
                path, "': ", what, " has shape ", ShapeText(t.sizes()), " but the first input has ",
                ShapeText(inputs_[0].sizes()),
                "; every tensor needs one row per example along dim 0");
    t = t.contiguous();
  }
  std::vector<at::Tensor> inputs_;
  at::Tensor targets_;
};

// A language model's token stream, cut into windows of seq_len + 1 tokens.
class TokenWindows : public DataSource {
 public:
  TokenWindows(const std::string& path, int64_t seq_len, int bits)
      : tokens_(ArrayFile::OpenTokens(path, bits)), seq_len_(seq_len) {
    TORCH_CHECK(tokens_->rows() > seq_len, "token file '", path, "' has ", tokens_->rows(),
                " tokens, fewer than --seq-len ", seq_len, " + 1; use a shorter --seq-len");
  }
  int64_t size() const override { return (tokens_->rows() - 1) / seq_len_; }
  DataBatch Get(const std::vector<int64_t>& indices) const override {
    std::vector<at::Tensor> windows;
    for (int64_t i : indices) {
      TORCH_CHECK(i >= 0 && i < size(), "example ", i, " is out of range (", size(), " windows)");
      windows.push_back(tokens_->Elements(i * seq_len_, seq_len_ + 1));
    }
    at::Tensor all = at::stack(windows);
    return {{all.narrow(1, 0, seq_len_).contiguous()}, all.narrow(1, 1, seq_len_).contiguous()};
  }
  std::string Describe() const override {
    return std::to_string(size()) + " windows of " + std::to_string(seq_len_) + " tokens (" +
           std::to_string(tokens_->rows()) + " tokens); inputs [" + std::to_string(seq_len_) +
           "] int64; targets [" + std::to_string(seq_len_) + "] int64, the inputs shifted by one";
  }

 private:
  std::shared_ptr<const ArrayFile> tokens_;
  int64_t seq_len_;
};

class Slice : public DataSource {
 public:
  Slice(std::shared_ptr<const DataSource> source, int64_t begin, int64_t end)
      : source_(std::move(source)), begin_(begin), end_(end) {}
  int64_t size() const override { return end_ - begin_; }
  DataBatch Get(const std::vector<int64_t>& indices) const override {
    std::vector<int64_t> shifted;
    for (int64_t i : indices) {
      TORCH_CHECK(i >= 0 && i < size(), "example ", i, " is out of range (", size(), " examples)");
      shifted.push_back(begin_ + i);
    }
    return source_->Get(shifted);
  }
  std::string Describe() const override {
    std::string whole = source_->Describe();
    return std::to_string(size()) + whole.substr(whole.find(' '));
  }

 private:
  std::shared_ptr<const DataSource> source_;
  int64_t begin_, end_;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::shared_ptr<const DataSource> OpenDataSource(const std::string& path,
                                                 const DataOptions& options) {
  TORCH_CHECK(boost::filesystem::exists(path), "data path '", path, "' does not exist");
  if (boost::filesystem::is_directory(path)) return std::make_shared<NpyDirectory>(path);
  if (EndsWith(path, ".pt") || EndsWith(path, ".pth")) return std::make_shared<SavedTensors>(path);
  if (EndsWith(path, ".bin")) {
    TORCH_CHECK(options.seq_len && *options.seq_len >= 1, "token file '", path,
                "' needs --seq-len L (tokens per example)");
    return std::make_shared<TokenWindows>(path, *options.seq_len, options.token_bits);
  }
  TORCH_CHECK(false, "data path '", path,
              "' is neither a directory of .npy files, a .pt file from torch.save, ",
              "nor a .bin token file; see gpipe-run --help for the formats");
}

std::shared_ptr<const DataSource> SliceDataSource(std::shared_ptr<const DataSource> source,
                                                  int64_t begin, int64_t end) {
  TORCH_CHECK(0 <= begin && begin < end && end <= source->size(), "examples [", begin, ", ", end,
              ") are not a part of ", source->size());
  return std::make_shared<Slice>(std::move(source), begin, end);
}

std::string DataFingerprint(const DataSource& source) {
  constexpr int64_t kSamples = 64;
  const int64_t n = source.size();
  std::vector<int64_t> indices;
  for (int64_t k = 0; k < std::min(n, kSamples); ++k)
    indices.push_back(k * n / std::min(n, kSamples));
  boost::crc_32_type crc;
  crc.process_bytes(&n, sizeof n);
  DataBatch batch = indices.empty() ? DataBatch() : source.Get(indices);
  std::vector<at::Tensor> tensors = batch.inputs;
  if (batch.targets.defined()) tensors.push_back(batch.targets);
  for (const at::Tensor& tensor : tensors) {
    const at::Tensor t = tensor.contiguous();
    const auto dtype = static_cast<int64_t>(t.scalar_type());
    crc.process_bytes(&dtype, sizeof dtype);
    crc.process_bytes(t.sizes().data(), t.sizes().size() * sizeof(int64_t));
    crc.process_bytes(t.data_ptr(), t.nbytes());
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc.checksum());
  return hex;
}

DataBatch DataSourceDataset::get_batch(c10::ArrayRef<size_t> positions) {
  std::vector<int64_t> indices;
  indices.reserve(positions.size());
  for (size_t p : positions) indices.push_back(order_.at(p));
  return source_->Get(indices);
}

}  // namespace gpipe
