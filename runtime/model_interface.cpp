#include "runtime/model_interface.h"

#include <sstream>

#include <c10/util/Exception.h>

#include "runtime/model_interface_json.h"

namespace gpipe {
namespace {

using nlohmann::json;

std::string Shape(at::IntArrayRef sizes, bool batch_as_n) {
  std::string text = "[";
  for (size_t d = 0; d < sizes.size(); ++d) {
    text += (d ? ", " : "") + (d == 0 && batch_as_n ? std::string("N") : std::to_string(sizes[d]));
  }
  return text + "]";
}

const std::vector<std::pair<c10::ScalarType, const char*>>& DtypeNames() {
  static const std::vector<std::pair<c10::ScalarType, const char*>> names = {
      {c10::kFloat, "float32"},     {c10::kDouble, "float64"}, {c10::kHalf, "float16"},
      {c10::kBFloat16, "bfloat16"}, {c10::kLong, "int64"},     {c10::kInt, "int32"},
      {c10::kShort, "int16"},       {c10::kChar, "int8"},      {c10::kByte, "uint8"},
      {c10::kBool, "bool"}};
  return names;
}

std::string DtypeName(c10::ScalarType t) {
  for (const auto& [type, name] : DtypeNames()) {
    if (type == t) return name;
  }
  return c10::toString(t);
}

std::optional<c10::ScalarType> DtypeFromName(const std::string& text) {
  for (const auto& [type, name] : DtypeNames()) {
    if (text == name) return type;
  }
  return std::nullopt;
}

// Converts `value` to what an argument of `type` takes, or explains why not.
c10::IValue Coerce(const ForwardArgument& arg, c10::IValue value) {
  const std::string& t = arg.type;
  auto fail = [&](const char* wants) {
    TORCH_CHECK(false, "argument '", arg.name, "' must be ", wants, " but got ", value.tagKind(),
                "; pass ", wants, " (forward takes ", arg.name, ": ", t, ")");
  };
  bool optional = t.rfind("Optional[", 0) == 0;
  if (optional && value.isNone()) return value;
  std::string inner = optional ? t.substr(9, t.size() - 10) : t;
  if (inner == "Tensor" && !value.isTensor()) fail("a tensor");
  if (inner == "int" && !value.isInt()) fail("an int");
  if (inner == "bool" && !value.isBool()) fail("a bool");
  if (inner == "float") {
    if (value.isInt()) return static_cast<double>(value.toInt());
    if (!value.isDouble()) fail("a float");
  }
  return value;
}

bool Floating(c10::ScalarType t) { return at::isFloatingType(t) || at::isComplexType(t); }

// The sizes an argument must have to match its sample (dim 0 is free when batched).
bool SizesMatch(const ForwardArgument& arg, at::IntArrayRef sizes) {
  if (sizes.size() != arg.sample_sizes.size()) return false;
  for (size_t d = arg.batched ? 1 : 0; d < sizes.size(); ++d) {
    if (sizes[d] != arg.sample_sizes[d]) return false;
  }
  return true;
}

void Flatten(const c10::IValue& v, const std::string& path,
             std::vector<std::pair<std::string, c10::IValue>>& out) {
  const std::string here = path.empty() ? "out" : path;
  if (v.isTuple() || v.isList()) {
    std::vector<c10::IValue> elements =
        v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
    for (size_t k = 0; k < elements.size(); ++k)
      Flatten(elements[k], here + "[" + std::to_string(k) + "]", out);
  } else if (v.isGenericDict()) {
    for (const auto& entry : v.toGenericDict()) {
      const c10::IValue& key = entry.key();
      std::ostringstream text;
      text << key;
      std::string name = key.isString() ? key.toStringRef() : text.str();
      Flatten(entry.value(), path.empty() ? name : path + "." + name, out);
    }
  } else {
    out.emplace_back(here, v);
  }
}

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

OutputStructure OutputStructure::Leaf(size_t index) {
  OutputStructure s;
  s.leaf = index;
  return s;
}

OutputStructure OutputStructure::Default(size_t num_outputs) {
  if (num_outputs == 1) return Leaf(0);
  OutputStructure s;
  s.kind = Kind::Tuple;
  for (size_t k = 0; k < num_outputs; ++k) s.elements.push_back(Leaf(k));
  return s;
}

std::string SignatureText(const std::vector<ForwardArgument>& signature) {
  std::ostringstream text;
  text << "forward(";
  for (size_t k = 0; k < signature.size(); ++k) {
    text << (k ? ", " : "") << signature[k].name << ": " << signature[k].type;
    if (signature[k].default_value) text << " = " << *signature[k].default_value;
  }
  text << ")";
  return text.str();
}

std::vector<c10::IValue> BindArguments(const std::vector<ForwardArgument>& signature,
                                       std::vector<c10::IValue> args, const Kwargs& kwargs) {
  TORCH_CHECK(args.size() <= signature.size(), "the model takes ", signature.size(), " argument",
              signature.size() == 1 ? "" : "s", " but got ", args.size(), "; ",
              SignatureText(signature));
  std::vector<std::optional<c10::IValue>> bound(signature.size());
  for (size_t k = 0; k < args.size(); ++k) bound[k] = std::move(args[k]);
  for (const auto& [name, value] : kwargs) {
    size_t k = 0;
    while (k < signature.size() && signature[k].name != name) ++k;
    TORCH_CHECK(k < signature.size(), "the model has no argument '", name, "'; ",
                SignatureText(signature));
    TORCH_CHECK(!bound[k], "argument '", name,
                "' is given both by position and by name; give it once");
    bound[k] = value;
  }
  std::vector<c10::IValue> inputs;
  for (size_t k = 0; k < signature.size(); ++k) {
    const ForwardArgument& arg = signature[k];
    if (!bound[k]) {
      TORCH_CHECK(arg.default_value, "argument '", arg.name, "' (", arg.type,
                  ") is missing and has no default; pass it: ", SignatureText(signature));
      bound[k] = *arg.default_value;
    }
    inputs.push_back(Coerce(arg, std::move(*bound[k])));
  }
  return inputs;
}

void CheckArguments(const std::vector<ForwardArgument>& signature,
                    const std::vector<c10::IValue>& inputs) {
  for (size_t k = 0; k < signature.size() && k < inputs.size(); ++k) {
    const ForwardArgument& arg = signature[k];
    if (!inputs[k].isTensor() || !arg.sample_dtype) continue;
    const at::Tensor& t = inputs[k].toTensor();
    TORCH_CHECK(Floating(t.scalar_type()) == Floating(*arg.sample_dtype), "input '", arg.name,
                "' is ", DtypeName(t.scalar_type()), " but the model was compiled with ",
                DtypeName(*arg.sample_dtype), " for it; pass ", DtypeName(*arg.sample_dtype),
                " values");
    if (arg.sample_sizes.empty()) continue;
    TORCH_CHECK(t.dim() == static_cast<int64_t>(arg.sample_sizes.size()), "input '", arg.name,
                "' has shape ", Shape(t.sizes(), false), " (", t.dim(),
                " dims) but the model expects ", Shape(arg.sample_sizes, arg.batched), " (",
                arg.sample_sizes.size(), " dims, as compiled); pass a tensor of shape ",
                Shape(arg.sample_sizes, arg.batched));
  }
}

std::optional<std::string> DescribeMismatch(const std::vector<ForwardArgument>& signature,
                                            const std::vector<c10::IValue>& inputs) {
  for (size_t k = 0; k < signature.size() && k < inputs.size(); ++k) {
    const ForwardArgument& arg = signature[k];
    if (!inputs[k].isTensor() || !arg.sample_dtype) continue;
    const at::Tensor& t = inputs[k].toTensor();
    std::ostringstream line;
    if (t.scalar_type() != *arg.sample_dtype) {
      line << "input '" << arg.name << "' is " << DtypeName(t.scalar_type())
           << " but the model expects " << DtypeName(*arg.sample_dtype)
           << " (as compiled) and fails on it; pass " << DtypeName(*arg.sample_dtype) << " values";
      return line.str();
    }
    if (!arg.sample_sizes.empty() && !SizesMatch(arg, t.sizes())) {
      std::string want = Shape(arg.sample_sizes, arg.batched);
      line << "input '" << arg.name << "' has shape " << Shape(t.sizes(), false)
           << " but the model expects " << want
           << " (as compiled) and fails on it; pass a tensor of shape " << want;
      return line.str();
    }
  }
  return std::nullopt;
}

c10::IValue RebuildOutput(const OutputStructure& s, const std::vector<at::Tensor>& outputs) {
  switch (s.kind) {
    case OutputStructure::Kind::Leaf: {
      const at::Tensor& t = outputs.at(s.leaf);
      return t.defined() ? c10::IValue(t) : c10::IValue();
    }
    case OutputStructure::Kind::Constant:
      return s.constant;
    case OutputStructure::Kind::Tuple: {
      std::vector<c10::IValue> elements;
      for (const auto& e : s.elements) elements.push_back(RebuildOutput(e, outputs));
      return c10::ivalue::Tuple::create(std::move(elements));
    }
    case OutputStructure::Kind::List: {
      std::vector<c10::IValue> elements;
      bool tensors = true;
      for (const auto& e : s.elements) {
        elements.push_back(RebuildOutput(e, outputs));
        tensors = tensors && elements.back().isTensor();
      }
      if (tensors) {
        c10::List<at::Tensor> list;
        for (const auto& e : elements) list.push_back(e.toTensor());
        return list;
      }
      c10::impl::GenericList list(c10::AnyType::get());
      for (auto& e : elements) list.push_back(std::move(e));
      return list;
    }
    case OutputStructure::Kind::Dict: {
      c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
      for (size_t k = 0; k < s.elements.size(); ++k)
        dict.insert(s.keys.at(k), RebuildOutput(s.elements[k], outputs));
      return dict;
    }
  }
  TORCH_INTERNAL_ASSERT(false);
}

std::vector<std::pair<std::string, c10::IValue>> FlattenWithPaths(const c10::IValue& value) {
  std::vector<std::pair<std::string, c10::IValue>> out;
  Flatten(value, "", out);
  return out;
}

json ArgumentsToJson(const std::vector<ForwardArgument>& signature) {
  json list = json::array();
  for (const auto& a : signature) {
    json j = {{"name", a.name}, {"type", a.type}, {"batched", a.batched}};
    if (a.default_value) j["default"] = ValueToJson(*a.default_value);
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
