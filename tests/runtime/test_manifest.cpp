#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/manifest.h"

namespace gpipe {
namespace {

Manifest TwoStages() {
  Manifest m;
  m.source_model = "mlp.pt";
  m.input_names = {"input"};
  ForwardArgument input;
  input.name = "input";
  m.arguments = {input};
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

TEST(Manifest, TheActivationBudgetAndItsPredictionsRoundTripAndAreChecked) {
  Manifest budget = TwoStages();
  budget.checkpoint = CheckpointMode::Budget;
  budget.activation_budget_mib = 12.5;
  budget.stages[0].planned_kept_bytes = 123456;
  budget.stages[0].planned_recompute_flops = 7.5e9;
  Manifest m = ParseManifest(ManifestToJson(budget));
  EXPECT_EQ(m.checkpoint, CheckpointMode::Budget);
  EXPECT_EQ(m.activation_budget_mib, 12.5);
  EXPECT_EQ(m.stages[0].planned_kept_bytes, 123456);
  EXPECT_EQ(m.stages[0].planned_recompute_flops, 7.5e9);
  EXPECT_FALSE(m.stages[1].planned_kept_bytes);
  EXPECT_FALSE(ParseManifest(ManifestToJson(TwoStages())).activation_budget_mib);
  auto j = nlohmann::json::parse(ManifestToJson(budget));
  j["activation_budget_mib"] = -1;
  EXPECT_EQ(ErrorOf(j.dump()), "manifest: activation_budget_mib must be a positive number of MiB");
  j = nlohmann::json::parse(ManifestToJson(budget));
  j["stages"][0]["planned_kept_bytes"] = -5;
  EXPECT_EQ(ErrorOf(j.dump()),
            "manifest: stage 0 has a negative or non-finite recompute plan estimate");
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

TEST(Manifest, ForwardSignatureAndOutputStructureRoundTrip) {
  Manifest m = TwoStages();
  m.input_names = {"src", "mask", "scale"};
  ForwardArgument src, mask, scale;
  src.name = "src";
  src.sample_dtype = c10::kFloat;
  src.sample_sizes = {8, 16};
  mask.name = "mask";
  mask.type = "Optional[Tensor]";
  mask.default_value = c10::IValue();
  mask.batched = false;
  scale.name = "scale";
  scale.type = "float";
  scale.default_value = 0.5;
  m.arguments = {src, mask, scale};
  OutputStructure dict;
  dict.kind = OutputStructure::Kind::Dict;
  dict.keys = {"logits", "aux"};
  OutputStructure none;
  none.kind = OutputStructure::Kind::Constant;
  dict.elements = {OutputStructure::Leaf(0), none};
  m.output_structure = dict;
  Manifest back = ParseManifest(ManifestToJson(m));
  EXPECT_EQ(ManifestToJson(back), ManifestToJson(m));
  ASSERT_EQ(back.arguments.size(), 3u);
  EXPECT_EQ(back.arguments[0].sample_sizes, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(*back.arguments[0].sample_dtype, c10::kFloat);
  EXPECT_TRUE(back.arguments[1].default_value->isNone());
  EXPECT_FALSE(back.arguments[1].batched);
  EXPECT_EQ(back.arguments[2].default_value->toDouble(), 0.5);
  EXPECT_EQ(back.output_structure.keys, (std::vector<std::string>{"logits", "aux"}));

  auto j = nlohmann::json::parse(ManifestToJson(m));
  j["output_structure"]["dict"][0]["leaf"] = 3;  // there is one output
  EXPECT_NE(ErrorOf(j.dump()).find("the output structure names output 3 but the model has 1"), std::string::npos)
      << ErrorOf(j.dump());
  j = nlohmann::json::parse(ManifestToJson(m));
  j["arguments"][0]["sample_dtype"] = "float99";
  EXPECT_NE(ErrorOf(j.dump()).find("argument 'src' has an unknown sample_dtype \"float99\""), std::string::npos)
      << ErrorOf(j.dump());
  // An artifact from before the interface was recorded: arguments of any type, one output as itself.
  j = nlohmann::json::parse(ManifestToJson(TwoStages()));
  j.erase("arguments");
  j.erase("output_structure");
  Manifest old = ParseManifest(j.dump());
  EXPECT_EQ(old.arguments.at(0).type, "Any");
  EXPECT_EQ(old.output_structure.kind, OutputStructure::Kind::Leaf);
}

}  // namespace
}  // namespace gpipe
