// Manifest <-> JSON. The JSON library is nlohmann/json (Debian's
// nlohmann-json3-dev): Boost 1.74 in Debian 12 predates Boost.JSON, and
// Boost.PropertyTree's JSON turns every number into a string.

#include "runtime/manifest.h"

#include <cctype>
#include <cmath>
#include <type_traits>

#include <nlohmann/json.hpp>

#include <c10/util/Exception.h>

#include "runtime/model_interface_json.h"

namespace gpipe {
namespace {

using nlohmann::json;

json SourceToJson(const ValueSource& v) {
  if (v.origin == ValueSource::Origin::ModelInput) return {{"from", "input"}, {"index", v.index}};
  return {{"from", "stage"}, {"stage", v.stage}, {"index", v.index}};
}

// Field access that turns nlohmann's type errors into messages naming the field.
template <typename T>
T Field(const json& object, const char* key, const std::string& where) {
  TORCH_CHECK(object.is_object(), "manifest: ", where, " must be a JSON object");
  auto it = object.find(key);
  TORCH_CHECK(it != object.end(), "manifest: ", where, " has no field '", key, "'");
  // nlohmann converts 2.5 or 1e300 to an integer silently: integers must be integers.
  if constexpr (std::is_same_v<T, int64_t>) {
    TORCH_CHECK(it->is_number_integer(), "manifest: field '", key, "' of ", where,
                " has the wrong type (", it->type_name(), " ", it->dump(), "); it must be an integer");
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    TORCH_CHECK(it->is_array(), "manifest: field '", key, "' of ", where, " must be an array");
    for (const auto& e : *it) {
      TORCH_CHECK(e.is_number_integer(), "manifest: field '", key, "' of ", where,
                  " has the wrong type (holds ", e.dump(), "); it must hold integers");
    }
  }
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    TORCH_CHECK(false, "manifest: field '", key, "' of ", where, " has the wrong type (",
                it->type_name(), ")");
  }
}

// For fields added after format_version 1 was first written: absent = `fallback`.
template <typename T>
T OptionalField(const json& object, const char* key, const std::string& where, T fallback) {
  return object.contains(key) ? Field<T>(object, key, where) : fallback;
}

const json& ArrayField(const json& object, const char* key, const std::string& where) {
  TORCH_CHECK(object.is_object(), "manifest: ", where, " must be a JSON object");
  auto it = object.find(key);
  TORCH_CHECK(it != object.end(), "manifest: ", where, " has no field '", key, "'");
  TORCH_CHECK(it->is_array(), "manifest: field '", key, "' of ", where, " must be an array");
  return *it;
}

ValueSource SourceFromJson(const json& j, const std::string& where) {
  auto from = Field<std::string>(j, "from", where);
  ValueSource v;
  v.index = Field<int64_t>(j, "index", where);
  if (from == "input") {
    v.origin = ValueSource::Origin::ModelInput;
  } else if (from == "stage") {
    v.origin = ValueSource::Origin::StageOutput;
    v.stage = Field<int64_t>(j, "stage", where);
  } else {
    TORCH_CHECK(false, "manifest: ", where, " has from='", from, "'; expected 'input' or 'stage'");
  }
  return v;
}

bool SafeRecordName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    if (!ok) return false;  // no '/', '\\', NUL: records never leave the archive's folder
  }
  return true;
}

bool IsIdentifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

void CheckSource(const ValueSource& v, const Manifest& m, int64_t consumer, const std::string& where) {
  TORCH_CHECK(v.index >= 0, "manifest: ", where, " has a negative index");
  if (v.origin == ValueSource::Origin::ModelInput) {
    TORCH_CHECK(v.index < static_cast<int64_t>(m.input_names.size()), "manifest: ", where,
                " reads model input ", v.index, " but the model has ", m.input_names.size(),
                " inputs");
    return;
  }
  TORCH_CHECK(v.stage >= 0 && v.stage < consumer, "manifest: ", where, " reads stage ", v.stage,
              ", which is not an earlier stage");
  TORCH_CHECK(v.index < m.stages[v.stage].num_outputs, "manifest: ", where, " reads output ",
              v.index, " of stage ", v.stage, ", which has ", m.stages[v.stage].num_outputs,
              " outputs");
}

}  // namespace

std::string ManifestToJson(const Manifest& m) {
  json stages = json::array();
  for (const auto& s : m.stages) {
    json inputs = json::array();
    for (const auto& v : s.inputs) inputs.push_back(SourceToJson(v));
    json params = json::array();
    for (const auto& p : s.parameters) {
      params.push_back({{"name", p.name}, {"original", p.original},
                        {"kind", p.is_buffer ? "buffer" : "parameter"}});
    }
    json stage = {{"file", s.file}, {"device", s.device}, {"units", s.units},
                  {"inputs", inputs}, {"num_outputs", s.num_outputs}, {"uses_rng", s.uses_rng},
                  {"mutated_inputs", s.mutated_inputs},
                  {"parameters", params}};
    if (s.rank >= 0) stage["rank"] = s.rank;
    if (s.planned_kept_bytes) stage["planned_kept_bytes"] = *s.planned_kept_bytes;
    if (s.planned_recompute_flops) stage["planned_recompute_flops"] = *s.planned_recompute_flops;
    stages.push_back(std::move(stage));
  }
  json outputs = json::array();
  for (const auto& v : m.outputs) outputs.push_back(SourceToJson(v));
  json j = {{"format", "gpipe-cpp artifact"},
            {"format_version", m.format_version},
            {"source_model", m.source_model},
            {"inputs", m.input_names},
            {"arguments", ArgumentsToJson(m.arguments)},
            {"outputs", outputs},
            {"output_structure", OutputStructureToJson(m.output_structure)},
            {"chunks", m.chunks},
            {"checkpoint", ToString(m.checkpoint)},
            {"schedule", m.schedule},
            {"virtual_stages", m.virtual_stages},
            {"deferred_batch_norm", m.deferred_batch_norm},
            {"balance",
             {{"method", m.balance_method}, {"units", m.unit_names}, {"unit_costs", m.unit_costs}}},
            {"stages", stages}};
  if (m.activation_budget_mib) j["activation_budget_mib"] = *m.activation_budget_mib;
  return j.dump(2) + "\n";
}

Manifest ParseManifest(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e99999 (fuzzer)
    TORCH_CHECK(false, "manifest.json is not valid JSON (", e.what(),
                "); the artifact is damaged: compile it again");
  }
  Manifest m;
  TORCH_CHECK(j.is_object(), "manifest.json must hold a JSON object");
  m.format_version = Field<int64_t>(j, "format_version", "the manifest");
  TORCH_CHECK(m.format_version >= 1 && m.format_version <= kManifestFormatVersion,
              "artifact format version ", m.format_version, " is not supported by this build (",
              "it reads versions 1..", kManifestFormatVersion,
              "); recompile the model with this gpipe-compile or upgrade gpipe-cpp");
  m.source_model = Field<std::string>(j, "source_model", "the manifest");
  m.input_names = Field<std::vector<std::string>>(j, "inputs", "the manifest");
  if (j.contains("arguments")) {
    m.arguments = ArgumentsFromJson(j["arguments"]);
  } else {
    for (const auto& name : m.input_names) {
      ForwardArgument arg;
      arg.name = name;
      arg.type = "Any";
      m.arguments.push_back(std::move(arg));
    }
  }
  for (const auto& o : ArrayField(j, "outputs", "the manifest")) {
    m.outputs.push_back(SourceFromJson(o, "a model output"));
  }
  m.output_structure = j.contains("output_structure")
                           ? OutputStructureFromJson(j["output_structure"], m.outputs.size())
                           : OutputStructure::Default(m.outputs.size());
  m.chunks = Field<int64_t>(j, "chunks", "the manifest");
  m.checkpoint = ParseCheckpointMode(Field<std::string>(j, "checkpoint", "the manifest"));
  m.deferred_batch_norm = OptionalField<bool>(j, "deferred_batch_norm", "the manifest", false);
  m.schedule = OptionalField<std::string>(j, "schedule", "the manifest", "gpipe");
  m.virtual_stages = OptionalField<int64_t>(j, "virtual_stages", "the manifest", 1);
  if (j.contains("activation_budget_mib")) {
    m.activation_budget_mib = Field<double>(j, "activation_budget_mib", "the manifest");
  }
  if (j.contains("balance")) {
    const json& b = j["balance"];
    m.balance_method = Field<std::string>(b, "method", "the manifest's balance");
    m.unit_names = Field<std::vector<std::string>>(b, "units", "the manifest's balance");
    m.unit_costs = Field<std::vector<double>>(b, "unit_costs", "the manifest's balance");
    TORCH_CHECK(m.unit_costs.empty() || m.unit_costs.size() == m.unit_names.size(), "manifest: ",
                m.unit_costs.size(), " unit costs for ", m.unit_names.size(), " units");
  }
  const json& stages = ArrayField(j, "stages", "the manifest");
  for (size_t s = 0; s < stages.size(); ++s) {
    std::string where = "stage " + std::to_string(s);
    const json& js = stages[s];
    StageEntry st;
    st.file = Field<std::string>(js, "file", where);
    st.device = Field<std::string>(js, "device", where);
    st.units = Field<std::vector<std::string>>(js, "units", where);
    for (const auto& i : ArrayField(js, "inputs", where)) {
      st.inputs.push_back(SourceFromJson(i, "an input of " + where));
    }
    st.num_outputs = Field<int64_t>(js, "num_outputs", where);
    st.uses_rng = Field<bool>(js, "uses_rng", where);
    st.mutated_inputs = OptionalField<std::vector<int64_t>>(js, "mutated_inputs", where, {});
    st.rank = OptionalField<int64_t>(js, "rank", where, -1);
    TORCH_CHECK(!js.contains("rank") || st.rank >= 0, "manifest: ", where, " has rank ", st.rank,
                "; a rank is a non-negative integer");
    if (js.contains("planned_kept_bytes")) {
      st.planned_kept_bytes = Field<int64_t>(js, "planned_kept_bytes", where);
    }
    if (js.contains("planned_recompute_flops")) {
      st.planned_recompute_flops = Field<double>(js, "planned_recompute_flops", where);
    }
    for (const auto& p : ArrayField(js, "parameters", where)) {
      ParameterEntry e;
      e.name = Field<std::string>(p, "name", "a parameter of " + where);
      e.original = Field<std::string>(p, "original", "a parameter of " + where);
      auto kind = Field<std::string>(p, "kind", "a parameter of " + where);
      TORCH_CHECK(kind == "parameter" || kind == "buffer", "manifest: parameter '", e.original,
                  "' of ", where, " has kind '", kind, "'; expected 'parameter' or 'buffer'");
      e.is_buffer = kind == "buffer";
      st.parameters.push_back(std::move(e));
    }
    m.stages.push_back(std::move(st));
  }
  ValidateManifest(m);
  return m;
}

void ValidateManifest(const Manifest& m) {
  TORCH_CHECK(!m.stages.empty(), "manifest: the artifact has no stages");
  TORCH_CHECK(m.chunks >= 1, "manifest: chunks is ", m.chunks, "; it must be at least 1");
  TORCH_CHECK(m.virtual_stages >= 1, "manifest: virtual_stages is ", m.virtual_stages,
              "; it must be at least 1");
  TORCH_CHECK(m.arguments.size() == m.input_names.size(), "manifest: ", m.arguments.size(),
              " arguments for ", m.input_names.size(), " inputs");
  TORCH_CHECK(!m.activation_budget_mib ||
                  (std::isfinite(*m.activation_budget_mib) && *m.activation_budget_mib > 0),
              "manifest: activation_budget_mib must be a positive number of MiB");
  const auto num_stages = static_cast<int64_t>(m.stages.size());
  for (int64_t s = 0; s < num_stages; ++s) {
    const auto& st = m.stages[s];
    std::string where = "stage " + std::to_string(s);
    TORCH_CHECK(SafeRecordName(st.file), "manifest: ", where, " names the file '", st.file,
                "', which is not a plain file name inside the artifact");
    TORCH_CHECK(st.num_outputs >= 0, "manifest: ", where, " has a negative output count");
    TORCH_CHECK(st.planned_kept_bytes.value_or(0) >= 0 &&
                    std::isfinite(st.planned_recompute_flops.value_or(0)) &&
                    st.planned_recompute_flops.value_or(0) >= 0,
                "manifest: ", where, " has a negative or non-finite recompute plan estimate");
    for (const auto& v : st.inputs) CheckSource(v, m, s, "an input of " + where);
    for (int64_t k : st.mutated_inputs) {
      TORCH_CHECK(k >= 0 && k < static_cast<int64_t>(st.inputs.size()), "manifest: ", where,
                  " lists mutated input ", k, " but has ", st.inputs.size(), " inputs");
    }
    for (const auto& p : st.parameters) {
      TORCH_CHECK(IsIdentifier(p.name), "manifest: parameter name '", p.name, "' of ", where,
                  " is not an identifier");
    }
  }
  for (const auto& v : m.outputs) CheckSource(v, m, num_stages, "a model output");
  for (const auto& st : m.stages) {
    TORCH_CHECK((st.rank >= 0) == (m.stages[0].rank >= 0),
                "manifest: some stages have a rank and some do not; give every stage one or none");
  }
}

}  // namespace gpipe
