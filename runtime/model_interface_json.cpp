// The manifest's JSON for the model interface (see model_interface_json.h).

#include "runtime/model_interface_json.h"

#include <c10/util/Exception.h>

namespace gpipe {
namespace {

using nlohmann::json;

json ValueToJson(const c10::IValue& v) {
  if (v.isNone()) return nullptr;
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt();
  if (v.isDouble()) return v.toDouble();
  if (v.isString()) return v.toStringRef();
  if (v.isIntList()) return v.toIntVector();
  if (v.isDoubleList()) return v.toDoubleVector();
  if (v.isBoolList()) {
    json list = json::array();
    for (bool b : v.toBoolList()) list.push_back(b);
    return list;
  }
  TORCH_CHECK(false, "cannot record a value of kind ", v.tagKind());
}

template <typename T>
c10::List<T> ListFromJson(const json& j, bool (json::*is)() const noexcept, const char* what,
                          const std::string& where) {
  c10::List<T> list;
  for (const auto& e : j) {
    TORCH_CHECK((e.*is)(), "manifest: ", where, " must hold ", what);
    list.push_back(e.get<T>());
  }
  return list;
}

c10::IValue ValueFromJson(const json& j, const std::string& type, const std::string& where) {
  if (j.is_null()) return c10::IValue();
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  TORCH_CHECK(j.is_array(), "manifest: ", where, " is not a value the artifact can hold");
  if (type.find("float") != std::string::npos) {
    return ListFromJson<double>(j, &json::is_number, "numbers", where);
  }
  if (type.find("bool") != std::string::npos)
    return ListFromJson<bool>(j, &json::is_boolean, "booleans", where);
  return ListFromJson<int64_t>(j, &json::is_number_integer, "integers", where);
}

const json& Member(const json& j, const char* key, const std::string& where) {
  TORCH_CHECK(j.is_object() && j.contains(key), "manifest: ", where, " has no field '", key, "'");
  return j.at(key);
}

OutputStructure StructureFromJson(const json& j, size_t num_outputs, size_t depth) {
  const std::string where = "the output structure";
  TORCH_CHECK(depth < 64, "manifest: ", where, " is nested too deeply");
  TORCH_CHECK(j.is_object() && j.size() >= 1, "manifest: ", where, " must hold JSON objects");
  OutputStructure s;
  if (j.contains("leaf")) {
    const json& leaf = j.at("leaf");
    TORCH_CHECK(leaf.is_number_unsigned() && leaf.get<size_t>() < num_outputs, "manifest: ", where,
                " names output ", leaf.dump(), " but the model has ", num_outputs);
    return OutputStructure::Leaf(leaf.get<size_t>());
  }
  if (j.contains("constant")) {
    s.kind = OutputStructure::Kind::Constant;
    s.constant = ValueFromJson(j.at("constant"), "", where);
    return s;
  }
  const char* kinds[] = {"tuple", "list", "dict"};
  const OutputStructure::Kind values[] = {OutputStructure::Kind::Tuple, OutputStructure::Kind::List,
                                          OutputStructure::Kind::Dict};
  for (size_t k = 0; k < 3; ++k) {
    if (!j.contains(kinds[k])) continue;
    s.kind = values[k];
    const json& elements = j.at(kinds[k]);
    TORCH_CHECK(elements.is_array(), "manifest: ", where, "'s ", kinds[k], " must be an array");
    for (const auto& e : elements)
      s.elements.push_back(StructureFromJson(e, num_outputs, depth + 1));
    if (j.contains("keys")) {
      const json& keys = j.at("keys");
      TORCH_CHECK(keys.is_array() && keys.size() == s.elements.size(), "manifest: ", where,
                  " needs one key per element");
      for (const auto& key : keys) {
        TORCH_CHECK(key.is_string(), "manifest: ", where, "'s keys must be strings");
        s.keys.push_back(key.get<std::string>());
      }
    }
    TORCH_CHECK(s.kind != OutputStructure::Kind::Dict || s.keys.size() == s.elements.size(),
                "manifest: ", where, "'s dict needs its keys");
    return s;
  }
  TORCH_CHECK(false, "manifest: ", where, " holds ", j.dump(),
              "; expected leaf, constant, tuple, list or dict");
}

}  // namespace

json ArgumentsToJson(const std::vector<ForwardArgument>& signature) {
  json list = json::array();
  for (const auto& a : signature) {
    json j = {{"name", a.name}, {"type", a.type}, {"batched", a.batched}};
    if (a.default_value) j["default"] = ValueToJson(*a.default_value);
    if (a.specialized) j["specialized"] = true;
    if (a.sample_dtype) {
      j["sample_dtype"] = DtypeName(*a.sample_dtype);
      j["sample_sizes"] = a.sample_sizes;
    }
    list.push_back(std::move(j));
  }
  return list;
}

std::vector<ForwardArgument> ArgumentsFromJson(const json& j) {
  TORCH_CHECK(j.is_array(), "manifest: 'arguments' must be an array");
  std::vector<ForwardArgument> signature;
  for (const auto& a : j) {
    ForwardArgument arg;
    const json& name = Member(a, "name", "an argument");
    const json& type = Member(a, "type", "an argument");
    const json& batched = Member(a, "batched", "an argument");
    TORCH_CHECK(name.is_string() && type.is_string() && batched.is_boolean(), "manifest: argument ",
                a.dump(), " has a field of the wrong type");
    arg.name = name.get<std::string>();
    arg.type = type.get<std::string>();
    arg.batched = batched.get<bool>();
    const std::string where = "the default of argument '" + arg.name + "'";
    if (a.contains("default")) arg.default_value = ValueFromJson(a.at("default"), arg.type, where);
    if (a.contains("specialized")) {
      TORCH_CHECK(a.at("specialized").is_boolean() && (arg.default_value || !a.at("specialized").get<bool>()),
                  "manifest: argument '", arg.name, "' is marked specialized without a default");
      arg.specialized = a.at("specialized").get<bool>();
    }
    if (a.contains("sample_dtype")) {
      const json& dtype = a.at("sample_dtype");
      TORCH_CHECK(dtype.is_string() && DtypeFromName(dtype.get<std::string>()),
                  "manifest: argument '", arg.name, "' has an unknown sample_dtype ", dtype.dump());
      arg.sample_dtype = DtypeFromName(dtype.get<std::string>());
      const json& sizes = Member(a, "sample_sizes", "argument '" + arg.name + "'");
      TORCH_CHECK(sizes.is_array(), "manifest: argument '", arg.name,
                  "' has sample_sizes that are not an array");
      for (const auto& d : sizes) {
        TORCH_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "manifest: argument '",
                    arg.name, "' has a sample size that is not a non-negative integer");
        arg.sample_sizes.push_back(d.get<int64_t>());
      }
    }
    signature.push_back(std::move(arg));
  }
  return signature;
}

json OutputStructureToJson(const OutputStructure& s) {
  switch (s.kind) {
    case OutputStructure::Kind::Leaf:
      return {{"leaf", s.leaf}};
    case OutputStructure::Kind::Constant:
      return {{"constant", ValueToJson(s.constant)}};
    default: {
      json elements = json::array();
      for (const auto& e : s.elements) elements.push_back(OutputStructureToJson(e));
      const char* kind = s.kind == OutputStructure::Kind::Tuple  ? "tuple"
                         : s.kind == OutputStructure::Kind::List ? "list"
                                                                 : "dict";
      json j = {{kind, elements}};
      if (!s.keys.empty()) j["keys"] = s.keys;
      return j;
    }
  }
}

OutputStructure OutputStructureFromJson(const json& j, size_t num_outputs) {
  return StructureFromJson(j, num_outputs, 0);
}

}  // namespace gpipe
