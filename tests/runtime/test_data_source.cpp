// The data readers of gpipe-run --data: NumPy arrays (read with pread), files
// from torch.save, token streams; and what each says about a bad file.

#include <gtest/gtest.h>

#include <fstream>

#include <ATen/ATen.h>

#include "runtime/array_file.h"
#include "runtime/data_source.h"
#include "runtime/training_state.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::ErrorOf;
using testing::TempDir;
using testing::TestModel;

// An .npy file (format 1.0) with this header dict and these data bytes.
void WriteNpy(const std::string& path, const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(header.size() & 0xFF));
  out.put(static_cast<char>(header.size() >> 8));
  out << header << data;
}

std::string Bytes(const at::Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()),
                     static_cast<size_t>(t.numel() * t.element_size()));
}

TEST(DataSource, NpyRowsAreTheArraysRowsInAnyOrder) {
  TempDir dir;
  at::Tensor x = at::arange(24, at::kFloat).reshape({4, 2, 3});
  WriteNpy(dir.path("x.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 3), }",
           Bytes(x));
  auto array = ArrayFile::OpenNpy(dir.path("x.npy"));
  EXPECT_EQ(array->rows(), 4);
  EXPECT_EQ(array->row_shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(at::equal(array->Rows({3, 0, 3}), x.index_select(0, at::tensor({3, 0, 3}))));
  EXPECT_EQ(ErrorOf([&] { array->Rows({4}); }),
            "row 4 of data file '" + dir.path("x.npy") + "' is out of range (it has 4 rows)");
}

TEST(DataSource, UnsignedArraysAndTokensWiden) {
  TempDir dir;
  const uint16_t values[] = {1, 65535, 40000};
  std::string data(reinterpret_cast<const char*>(values), sizeof values);
  WriteNpy(dir.path("u.npy"), "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", data);
  at::Tensor rows = ArrayFile::OpenNpy(dir.path("u.npy"))->Rows({0, 1, 2});
  EXPECT_EQ(rows.scalar_type(), at::kInt);
  EXPECT_TRUE(at::equal(rows, at::tensor({1, 65535, 40000}, at::kInt)));
  std::ofstream(dir.path("t.bin"), std::ios::binary) << data;
  at::Tensor tokens = ArrayFile::OpenTokens(dir.path("t.bin"), 16)->Elements(1, 2);
  EXPECT_TRUE(at::equal(tokens, at::tensor({65535, 40000}, at::kLong)));
}

TEST(DataSource, ABadNpyFileIsRefusedBeforeAnythingIsAllocated) {
  TempDir dir;
  const std::string f = dir.path("bad.npy");
  auto error = [&](const std::string& dict, const std::string& data) {
    WriteNpy(f, dict, data);
    return ErrorOf([&] { ArrayFile::OpenNpy(f); });
  };
  const std::string prefix = "data file '" + f + "' ";
  EXPECT_EQ(
      error("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", std::string(40, 'x')),
      prefix +
          "claims shape (4, 3) of <f4 but holds 40 bytes of data; the file is truncated or not "
          "what "
          "its header says");
  EXPECT_EQ(
      error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999, 99999999999), }",
            ""),
      prefix +
          "claims shape (99999999999999999, 99999999999) of <f4 but holds 0 bytes of data; the "
          "file is "
          "truncated or not what its header says");
  EXPECT_EQ(error("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd"),
            prefix +
                "holds dtype '>f4', which is not read; save it as little-endian bool, int8-64, "
                "uint8-32 or "
                "float16-64 (e.g. arr.astype('<f4'))");
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "abcd"),
            prefix + "is in Fortran order; save numpy.ascontiguousarray(arr) instead");
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (1, -2), }", "abcd"),
            prefix + "has a malformed shape (1, -2) in its .npy header");
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "abcd"),
            prefix + "holds a single scalar; data needs one row per example");
  std::ofstream(f, std::ios::binary) << "not numpy";
  EXPECT_EQ(ErrorOf([&] { ArrayFile::OpenNpy(f); }),
            prefix + "is not a NumPy .npy file (no \\x93NUMPY magic); write it with numpy.save");
  std::ofstream(f, std::ios::binary) << std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18);
  EXPECT_EQ(ErrorOf([&] { ArrayFile::OpenNpy(f); }),
            prefix + "is truncated inside its .npy header");
  std::ofstream(dir.path("odd.bin"), std::ios::binary) << "abc";
  EXPECT_EQ(ErrorOf([&] { ArrayFile::OpenTokens(dir.path("odd.bin"), 16); }),
            "data file '" + dir.path("odd.bin") +
                "' has 3 bytes, not a whole number of uint16 tokens; is "
                "--token-dtype right?");
}

// The same examples from the .npy directory and from the torch.save file
// (both written by tests/export_test_models.py from one tensor).
TEST(DataSource, NpyDirectoryAndTorchSaveFileHoldTheSameExamples) {
  auto npy = OpenDataSource(TestModel("data_cls"));
  auto saved = OpenDataSource(TestModel("data_cls.pt"));
  ASSERT_EQ(npy->size(), 50);
  ASSERT_EQ(saved->size(), 50);
  EXPECT_EQ(npy->Describe(), "50 examples; inputs [100] float32; targets [] int64");
  EXPECT_EQ(saved->Describe(), npy->Describe());
  DataBatch a = npy->Get({7, 3}), b = saved->Get({7, 3});
  EXPECT_TRUE(at::equal(a.inputs.at(0), b.inputs.at(0)));
  EXPECT_TRUE(at::equal(a.targets, b.targets));
  auto tail = SliceDataSource(npy, 40, 50);
  EXPECT_TRUE(at::equal(tail->Get({0}).inputs.at(0), npy->Get({40}).inputs.at(0)));
  EXPECT_EQ(tail->Describe(), "10 examples; inputs [100] float32; targets [] int64");
}

// The bytes of a fuzzer corpus file, without its first byte (which picks
// the reader in tests/fuzz/fuzz_data_readers.cpp).
std::string CorpusFile(const std::string& name) {
  std::ifstream in(std::string(GPIPE_FUZZ_CORPUS_DIR) + "/" + name, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GT(bytes.size(), 1u) << name;
  return bytes.size() > 1 ? bytes.substr(1) : "";
}

std::string StateError(const std::string& bytes) {
  return ErrorOf([&] { ParseTrainingState(bytes, "ck.gpipe"); });
}

// Found by tests/fuzz/fuzz_data_readers.cpp: LibTorch's unpickler threw
// std::out_of_range (not c10::Error) on these bytes, and it escaped; and a
// text field whose tensor claimed more bytes than its record held was read
// past the heap block. A checksum over the state now refuses damage before
// LibTorch reads it.
TEST(DataSource, ADamagedTrainingStateIsAClearError) {
  TrainingState state;
  state.step = 3;
  state.optimizer = "moments";
  state.cpu_rng = at::zeros({8}, at::kByte);
  state.options["--lr"] = "0.5";
  const std::string good = SerializeTrainingState(state);
  EXPECT_EQ(ParseTrainingState(good, "ck.gpipe").optimizer, "moments");
  EXPECT_EQ(good.rfind("gpipe-training-state crc32 ", 0), 0u);
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  const std::string prefix = "checkpoint 'ck.gpipe' has a damaged training state (";
  const std::string fix = "); resume from an earlier checkpoint, or train afresh without --resume";
  const size_t archive = good.size() - good.find('\n') - 1;
  EXPECT_EQ(StateError(flipped), prefix + "its checksum does not match" + fix);
  EXPECT_EQ(StateError(good.substr(0, good.size() - 7)),
            prefix + "its header says " + std::to_string(archive) + " bytes and it holds " +
                std::to_string(archive - 7) + fix);
  for (const std::string& damaged :
       {CorpusFile("regression_unpickler_out_of_range"),
        CorpusFile("regression_state_text_past_storage"), std::string("not a zip")}) {
    EXPECT_EQ(StateError(damaged), prefix + "no gpipe-training-state header" + fix);
  }
}

// Found by the fuzzer: LibTorch 1.13's in-memory zip reader (under
// torch::pickle_load) copied past the end of a damaged archive; and a
// tensor may claim more elements than its record holds (LibTorch's
// unpickler does not compare them). Both are refused before a read.
TEST(DataSource, ADamagedTorchSaveFileIsRefusedBeforeItsTensorsAreRead) {
  TempDir dir;
  const std::string path = dir.path("data.pt");
  const std::string prefix =
      "data file '" + path + "' is not a file torch.save wrote (or is damaged: ";
  const std::string fix =
      "); write it with torch.save({\"inputs\": X, \"targets\": Y}, '" + path + "')";
  for (const char* name : {"regression_pt_zip_past_end", "regression_pt_tensor_past_record"}) {
    std::ofstream(path, std::ios::binary) << CorpusFile(name);
    const std::string error = ErrorOf([&] { OpenDataSource(path); });
    EXPECT_EQ(error.rfind(prefix, 0), 0u) << error;
    EXPECT_EQ(error.size() >= fix.size() ? error.substr(error.size() - fix.size()) : error, fix);
    if (std::string(name) == "regression_pt_tensor_past_record") {
      EXPECT_EQ(error, prefix +
                           "a tensor claims 256 bytes of data, but its record holds 16; the file "
                           "is damaged" +
                           fix);
    }
  }
}

// Python writes a dict of one entry with SETITEM and a list of one element
// with APPEND, which LibTorch 1.13's unpickler lacks (a LibTorch that has
// them reads both); two entries (SETITEMS) are read on every version.
TEST(DataSource, ASavedDictOfOneEntryGetsAHintAndInputsOnlyAreRead) {
  TempDir dir;
  const std::string path = dir.path("data.pt");
  std::ofstream(path, std::ios::binary) << CorpusFile("pt_one_entry_dict");
  try {
    auto source = OpenDataSource(path);
    EXPECT_EQ(source->size(), 4);  // a LibTorch with SETITEM reads it
  } catch (const c10::Error& e) {
    EXPECT_EQ(std::string(e.what_without_backtrace()),
              "data file '" + path +
                  "' holds a dict of one entry, which this LibTorch cannot read (it lacks "
                  "pickle's SETITEM); give it a second entry: torch.save({\"inputs\": X, "
                  "\"targets\": None}, '" +
                  path + "')");
  }
  std::ofstream(path, std::ios::binary) << CorpusFile("pt_inputs_only");
  DataBatch batch = OpenDataSource(path)->Get({3, 1});
  ASSERT_EQ(batch.inputs.size(), 1u);
  EXPECT_EQ(batch.inputs[0].sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(batch.targets.defined());
  std::ofstream(path, std::ios::binary) << CorpusFile("pt_one_input_list");
  try {
    batch = OpenDataSource(path)->Get({3, 1});
    ASSERT_EQ(batch.inputs.size(), 1u);
    EXPECT_TRUE(at::equal(batch.targets, at::tensor(std::vector<int64_t>{3, 1})));
  } catch (const c10::Error& e) {
    EXPECT_EQ(std::string(e.what_without_backtrace()),
              "data file '" + path +
                  "' holds a list of one element, which this LibTorch cannot read (it lacks "
                  "pickle's APPEND); save the tensor itself: torch.save({\"inputs\": X, "
                  "\"targets\": Y}, '" +
                  path + "')");
  }
}

TEST(DataSource, TokenWindowsAreShiftedByOne) {
  DataOptions options;
  options.seq_len = 16;
  auto tokens = OpenDataSource(TestModel("tokens.bin"), options);
  EXPECT_EQ(tokens->size(), (1000 - 1) / 16);
  DataBatch batch = tokens->Get({2, 0});
  ASSERT_EQ(batch.inputs.at(0).sizes(), (std::vector<int64_t>{2, 16}));
  EXPECT_TRUE(at::equal(batch.inputs[0].narrow(1, 1, 15), batch.targets.narrow(1, 0, 15)));
  EXPECT_EQ(ErrorOf([&] { OpenDataSource(TestModel("tokens.bin")); }),
            "token file '" + TestModel("tokens.bin") + "' needs --seq-len L (tokens per example)");
  // A TorchScript model is not a data file; LibTorch's reason in the middle
  // differs between versions.
  const std::string error = ErrorOf([&] { OpenDataSource(TestModel("mlp9.pt")); });
  EXPECT_EQ(error.rfind("data file '" + TestModel("mlp9.pt") +
                            "' is not a file torch.save wrote (or is damaged: ",
                        0),
            0u)
      << error;
  EXPECT_NE(error.find("); write it with torch.save({\"inputs\": X, \"targets\": Y}, '" +
                       TestModel("mlp9.pt") + "')"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace gpipe
