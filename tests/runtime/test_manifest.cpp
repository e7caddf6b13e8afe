#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/manifest.h"

namespace gpipe {
namespace {

Manifest TwoStages() {
  Manifest m;
  m.source_model = "mlp.pt";
  m.input_names = {"input"};
  m.chunks = 4;
  m.checkpoint = CheckpointMode::Never;
  StageEntry s0;
  s0.file = "stage_0.pt";
  s0.device = "cpu";
  s0.units = {"0", "1"};
  s0.inputs = {{ValueSource::Origin::ModelInput, 0, 0}};
  s0.num_outputs = 1;
  s0.uses_rng = true;
  s0.parameters = {{"p0_0_weight", "0.weight", false}};
  StageEntry s1 = s0;
  s1.file = "stage_1.pt";
  s1.inputs = {{ValueSource::Origin::StageOutput, 0, 0}};
  s1.parameters = {{"p2_1_running_mean", "1.running_mean", true}};
  m.stages = {s0, s1};
  m.outputs = {{ValueSource::Origin::StageOutput, 1, 0}};
  return m;
}

std::string ErrorOf(const std::string& json) {
  try {
    ParseManifest(json);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(Manifest, RoundTrips) {
  Manifest m = ParseManifest(ManifestToJson(TwoStages()));
  EXPECT_EQ(m.chunks, 4);
  EXPECT_EQ(m.checkpoint, CheckpointMode::Never);
  ASSERT_EQ(m.stages.size(), 2u);
  EXPECT_EQ(m.stages[1].inputs[0].origin, ValueSource::Origin::StageOutput);
  EXPECT_TRUE(m.stages[1].parameters[0].is_buffer);
  EXPECT_EQ(m.stages[0].parameters[0].original, "0.weight");
  EXPECT_TRUE(m.stages[0].uses_rng);
  EXPECT_FALSE(m.deferred_batch_norm);
  EXPECT_EQ(ManifestToJson(m), ManifestToJson(TwoStages()));
}

TEST(Manifest, NewerFormatVersionIsRejected) {
  auto j = nlohmann::json::parse(ManifestToJson(TwoStages()));
  j["format_version"] = kManifestFormatVersion + 1;
  EXPECT_NE(ErrorOf(j.dump()).find("artifact format version 2 is not supported"), std::string::npos);
}

TEST(Manifest, BrokenJsonAndMissingFieldsNameTheProblem) {
  std::string text = ManifestToJson(TwoStages());
  EXPECT_NE(ErrorOf(text.substr(0, text.size() / 2)).find("is not valid JSON"), std::string::npos);
  auto j = nlohmann::json::parse(text);
  j["stages"][1].erase("num_outputs");
  EXPECT_NE(ErrorOf(j.dump()).find("stage 1 has no field 'num_outputs'"), std::string::npos);
  j = nlohmann::json::parse(text);
  j["chunks"] = "four";
  EXPECT_NE(ErrorOf(j.dump()).find("field 'chunks' of the manifest has the wrong type"), std::string::npos);
}

TEST(Manifest, FuzzerFindingsAreCleanErrors) {
  // tests/fuzz: a number too large for a double made nlohmann/json throw
  // out_of_range, which escaped as a non-c10 exception.
  const std::string overflow = "444444e+44444\xff\"";
  EXPECT_NE(ErrorOf(overflow).find("manifest.json is not valid JSON"), std::string::npos);
  auto j = nlohmann::json::parse(ManifestToJson(TwoStages()));
  j["chunks"] = 1e300;  // a double where an integer belongs: no silent truncation
  EXPECT_NE(ErrorOf(j.dump()).find("field 'chunks' of the manifest has the wrong type (number 1e+300); it must be an integer"), std::string::npos)
      << ErrorOf(j.dump());
  j = nlohmann::json::parse(ManifestToJson(TwoStages()));
  j["stages"][0]["inputs"][0]["index"] = 0.5;
  EXPECT_NE(ErrorOf(j.dump()).find("field 'index' of an input of stage 0 has the wrong type (number 0.5)"), std::string::npos)
      << ErrorOf(j.dump());
}

TEST(Manifest, RecordNamesCannotLeaveTheArchive) {
  auto j = nlohmann::json::parse(ManifestToJson(TwoStages()));
  j["stages"][0]["file"] = "../../etc/passwd";
  EXPECT_NE(ErrorOf(j.dump()).find("is not a plain file name inside the artifact"), std::string::npos);
}

TEST(Manifest, ReferencesMustPointToEarlierStages) {
  auto j = nlohmann::json::parse(ManifestToJson(TwoStages()));
  j["stages"][0]["inputs"][0] = {{"from", "stage"}, {"stage", 1}, {"index", 0}};
  EXPECT_NE(ErrorOf(j.dump()).find("reads stage 1, which is not an earlier stage"), std::string::npos);
  j = nlohmann::json::parse(ManifestToJson(TwoStages()));
  j["outputs"][0]["index"] = 5;
  EXPECT_NE(ErrorOf(j.dump()).find("reads output 5 of stage 1, which has 1 outputs"), std::string::npos);
}

}  // namespace
}  // namespace gpipe
