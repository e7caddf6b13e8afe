// Damaged or hostile artifacts: each must be refused with a message that names
// the file and the problem (docs/errors.md), never crash or load half.

#include <gtest/gtest.h>

#include <boost/filesystem.hpp>
#include <fstream>

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "runtime/artifact.h"
#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::RunCli;
using testing::TempDir;
using testing::TestModel;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// An artifact whose manifest text (and records) we write ourselves.
void WriteRawArtifact(const std::string& path, const std::string& manifest,
                      const std::vector<ArtifactRecord>& records) {
  std::ofstream out(path, std::ios::binary);
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) -> size_t {
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    return n;
  });
  writer.writeRecord("manifest.json", manifest.data(), manifest.size());
  for (const auto& r : records) writer.writeRecord(r.name, r.bytes.data(), r.bytes.size());
  writer.writeEndOfFile();
}

struct Compiled {
  nlohmann::json manifest;
  std::vector<ArtifactRecord> records;
};

Compiled CompileTwoStages(const TempDir& dir) {
  CompileOptions options;
  options.balance.num_stages = 2;
  CompileModel(TestModel("mlp9.pt"), dir.path("good.gpipe"), options);
  ArtifactReader reader(dir.path("good.gpipe"));
  Compiled c{nlohmann::json::parse(ManifestToJson(reader.manifest())), {}};
  for (const auto& st : reader.manifest().stages) c.records.push_back({st.file, reader.ReadRecord(st.file)});
  return c;
}

std::string LoadError(const std::string& path) {
  try {
    Pipeline::load(path);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(BadArtifact, TruncatedFile) {
  TempDir dir;
  CompileTwoStages(dir);
  std::string bytes = ReadAll(dir.path("good.gpipe"));
  std::ofstream(dir.path("cut.gpipe"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_HAS(LoadError(dir.path("cut.gpipe")), "is not a gpipe artifact (not a readable zip archive");
}

TEST(BadArtifact, ManifestNamesAMissingStageFile) {
  TempDir dir;
  Compiled c = CompileTwoStages(dir);
  c.manifest["stages"][1]["file"] = "stage_9.pt";
  WriteRawArtifact(dir.path("a.gpipe"), c.manifest.dump(), c.records);
  EXPECT_HAS(LoadError(dir.path("a.gpipe")),
             "stage 1 names the file 'stage_9.pt', which the archive does not contain");
}

TEST(BadArtifact, NewerFormatVersion) {
  TempDir dir;
  Compiled c = CompileTwoStages(dir);
  c.manifest["format_version"] = 7;
  WriteRawArtifact(dir.path("a.gpipe"), c.manifest.dump(), c.records);
  EXPECT_HAS(LoadError(dir.path("a.gpipe")), "artifact format version 7 is not supported by this build");
}

TEST(BadArtifact, MemberNameEscapingTheArchive) {
  TempDir dir;
  Compiled c = CompileTwoStages(dir);
  c.manifest["stages"][0]["file"] = "../../stage_0.pt";
  WriteRawArtifact(dir.path("a.gpipe"), c.manifest.dump(), c.records);
  EXPECT_HAS(LoadError(dir.path("a.gpipe")), "names the file '../../stage_0.pt', which is not a plain file name");
}

TEST(BadArtifact, TruncatedManifest) {
  TempDir dir;
  Compiled c = CompileTwoStages(dir);
  std::string text = c.manifest.dump();
  WriteRawArtifact(dir.path("a.gpipe"), text.substr(0, text.size() / 3), c.records);
  EXPECT_HAS(LoadError(dir.path("a.gpipe")), "manifest.json is not valid JSON");
}

TEST(BadArtifact, StageRecordThatIsNotTorchScript) {
  TempDir dir;
  Compiled c = CompileTwoStages(dir);
  c.records[1].bytes = "not a module";
  WriteRawArtifact(dir.path("a.gpipe"), c.manifest.dump(), c.records);
  EXPECT_HAS(LoadError(dir.path("a.gpipe")), "stage 1 ('stage_1.pt') is not a loadable TorchScript module");
}

// LibTorch's zip reader skips the zip's CRCs, so a flipped bit in a weight
// loaded as a different model; the `checksums` record refuses it, naming the
// record. An artifact from before that record is read unchecked.
TEST(BadArtifact, AFlippedBitIsRefusedNamingTheRecord) {
  TempDir dir;
  Compiled c = CompileTwoStages(dir);
  const std::string good = ReadAll(dir.path("good.gpipe"));
  const std::string manifest_text =
      ArtifactReader(dir.path("good.gpipe")).ReadRecord("manifest.json");
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"stage_1.pt", c.records[1].bytes}, {"manifest.json", manifest_text}}) {
    const size_t at = good.find(bytes);
    ASSERT_NE(at, std::string::npos) << name;
    std::string damaged = good;
    damaged[at + bytes.size() / 2] ^= 0x40;
    std::ofstream(dir.path("a.gpipe"), std::ios::binary) << damaged;
    EXPECT_EQ(
        LoadError(dir.path("a.gpipe")),
        "artifact '" + dir.path("a.gpipe") + "' is damaged: its record '" + name +
            "' does not match the checksum written with it (the file changed after it was "
            "saved); write it again with gpipe-compile, or resume from an earlier checkpoint");
  }
  std::vector<ArtifactRecord> records = c.records;
  records.push_back({"checksums", "gpipe-checksums crc32\nstage_0.pt 12 x\n"});
  WriteRawArtifact(dir.path("a.gpipe"), c.manifest.dump(), records);
  EXPECT_EQ(LoadError(dir.path("a.gpipe")),
            "artifact '" + dir.path("a.gpipe") +
                "' is damaged: its checksums record is unreadable; write it again with "
                "gpipe-compile, or resume from an earlier checkpoint");
  WriteRawArtifact(dir.path("old.gpipe"), c.manifest.dump(), c.records);
  EXPECT_EQ(LoadError(dir.path("old.gpipe")), "");
}

TEST(BadArtifact, CompileRejectsZeroChunksAndWritesNothing) {
  TempDir dir;
  auto result = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") + " --chunks 0");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_HAS(result.output, "--chunks is 0; it must be at least 1");
  EXPECT_FALSE(boost::filesystem::exists(dir.path("m.gpipe")));
}

}  // namespace
}  // namespace gpipe
