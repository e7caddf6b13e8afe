#include "runtime/training_state.h"

#include <cstdio>
#include <cstring>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

#include "runtime/checked_load.h"
#include "runtime/checksum.h"

namespace gpipe {
namespace {

constexpr int64_t kFormat = 1;
constexpr char kHeaderFormat[] = "gpipe-training-state crc32 %08x bytes %zu\n";

// The archive after the header, once its length and checksum match.
std::string CheckedArchive(const std::string& bytes) {
  const size_t line_end = bytes.find('\n');
  unsigned crc = 0;
  size_t size = 0;
  TORCH_CHECK(
      line_end != std::string::npos && line_end < 80 &&
          std::sscanf(bytes.c_str(), "gpipe-training-state crc32 %8x bytes %zu", &crc, &size) == 2,
      "no gpipe-training-state header");
  const std::string archive = bytes.substr(line_end + 1);
  TORCH_CHECK(archive.size() == size, "its header says ", size, " bytes and it holds ",
              archive.size());
  TORCH_CHECK(Crc32(archive.data(), archive.size()) == crc, "its checksum does not match");
  return archive;
}

at::Tensor Int(int64_t v) { return at::tensor({v}, at::kLong); }

at::Tensor Text(const std::string& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string TextOf(const at::Tensor& field) {
  TORCH_CHECK(field.scalar_type() == at::kByte && field.dim() == 1,
              "a text field is not a byte vector");
  const at::Tensor t = field.contiguous();
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()));
}

}  // namespace

std::string SerializeTrainingState(const TrainingState& state) {
  torch::serialize::OutputArchive archive;
  archive.write("format", Int(kFormat));
  archive.write("step", Int(state.step));
  archive.write("epoch", Int(state.epoch));
  archive.write("batches_done", Int(state.batches_done));
  archive.write("optimizer", Text(state.optimizer));
  archive.write("cpu_rng", state.cpu_rng);
  std::string options;
  for (const auto& [name, value] : state.options) options += name + "=" + value + "\n";
  archive.write("options", Text(options));
  std::ostringstream out;
  archive.save_to(out);
  const std::string bytes = out.str();
  char header[80];
  std::snprintf(header, sizeof header, kHeaderFormat, Crc32(bytes.data(), bytes.size()),
                bytes.size());
  return header + bytes;
}

TrainingState ParseTrainingState(const std::string& bytes, const std::string& where) {
  TrainingState state;
  try {
    torch::serialize::InputArchive archive;
    std::istringstream in(CheckedArchive(bytes));
    archive.load_from(in);
    // A fresh tensor each time: InputArchive::read assigns into a defined one in place.
    auto read = [&](const char* key) {
      at::Tensor t;
      archive.read(key, t);
      CheckWithinStorage(t, std::string("field ") + key);
      return t;
    };
    auto read_int = [&](const char* key) {
      at::Tensor t = read(key);
      TORCH_CHECK(t.scalar_type() == at::kLong && t.numel() == 1, "field ", key,
                  " is not one integer");
      return t.item<int64_t>();
    };
    TORCH_CHECK(read_int("format") == kFormat, "its format is not ", kFormat);
    state.step = read_int("step");
    state.epoch = read_int("epoch");
    state.batches_done = read_int("batches_done");
    TORCH_CHECK(state.step >= 0 && state.epoch >= 0 && state.batches_done >= 0,
                "a position is negative");
    state.optimizer = TextOf(read("optimizer"));
    state.cpu_rng = read("cpu_rng");
    std::istringstream lines(TextOf(read("options")));
    for (std::string line; std::getline(lines, line);) {
      size_t eq = line.find('=');
      TORCH_CHECK(eq != std::string::npos, "an option line has no '='");
      state.options[line.substr(0, eq)] = line.substr(eq + 1);
    }
  } catch (const std::exception& e) {
    // LibTorch's unpickler also throws std::out_of_range and the like on
    // damaged bytes (found by tests/fuzz/fuzz_data_readers.cpp).
    auto* error = dynamic_cast<const c10::Error*>(&e);
    TORCH_CHECK(false, "checkpoint '", where, "' has a damaged training state (",
                error ? error->what_without_backtrace() : e.what(),
                "); resume from an earlier checkpoint, or train afresh without --resume");
  }
  return state;
}

std::optional<std::string> DescribeOptionMismatch(const std::map<std::string, std::string>& saved,
                                                  const std::map<std::string, std::string>& now,
                                                  const std::string& checkpoint) {
  for (const auto& [name, value] : now) {
    auto it = saved.find(name);
    const std::string before = it == saved.end() ? "(unset)" : it->second;
    if (before == value) continue;
    return "checkpoint '" + checkpoint + "' was trained with " + name + " " + before +
           ", and this run asks for " + value +
           "; resume with the options it was trained with (or train afresh without --resume)";
  }
  return std::nullopt;
}

}  // namespace gpipe
