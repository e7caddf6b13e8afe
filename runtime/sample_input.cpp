#include "runtime/sample_input.h"

#include <cctype>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

namespace gpipe {
namespace {

int64_t ParsePositive(const std::string& token, const std::string& spec, const char* what) {
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(token, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == token.size() && value > 0, "input spec '", spec, "': ", what, " '", token,
              "' is not a positive integer (expected e.g. 64x512 or 8x128:int64:1000)");
  return value;
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

bool IsPlainValue(const std::string& text) {
  if (text == "true" || text == "false" || text == "True" || text == "False") return true;
  if (text.find_first_of(".eE") == std::string::npos) return false;  // "3" is a shape as much as a number
  size_t used = 0;
  try {
    std::stod(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == text.size();
}

bool IsIdentifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

InputSpec ParseOne(const std::string& written) {
  InputSpec spec;
  std::string text = written;
  size_t equals = text.find('=');
  if (equals != std::string::npos) {
    spec.name = text.substr(0, equals);
    TORCH_CHECK(IsIdentifier(spec.name), "input spec '", written, "': '", spec.name,
                "' is not an argument name (expected name=SHAPE, e.g. mask=8x16)");
    text = text.substr(equals + 1);
  }
  spec.text = text;
  if (IsPlainValue(text)) return spec;
  auto fields = Split(text, ':');
  TORCH_CHECK(!fields.empty() && fields.size() <= 3, "input spec '", text,
              "' should look like 64x512, 64x512:float64 or 8x128:int64:1000");
  for (const auto& dim : Split(fields[0], 'x')) spec.shape.push_back(ParsePositive(dim, text, "dimension"));
  if (fields.size() >= 2) {
    const std::string& t = fields[1];
    if (t == "float32" || t == "float") spec.dtype = c10::kFloat;
    else if (t == "float64" || t == "double") spec.dtype = c10::kDouble;
    else if (t == "int64" || t == "long") spec.dtype = c10::kLong;
    else if (t == "int32" || t == "int") spec.dtype = c10::kInt;
    else if (t == "bool") spec.dtype = c10::kBool;
    else TORCH_CHECK(false, "input spec '", text, "': unknown dtype '", t,
                     "'; use float32, float64, int64, int32 or bool");
  }
  bool integer = spec.dtype == c10::kLong || spec.dtype == c10::kInt;
  if (fields.size() == 3) {
    TORCH_CHECK(integer, "input spec '", text, "': an upper bound only applies to int64/int32 inputs");
    spec.high = ParsePositive(fields[2], text, "upper bound");
  }
  TORCH_CHECK(!integer || spec.high > 0, "input spec '", text,
              "': integer inputs need an upper bound, e.g. ", fields[0], ":int64:1000");
  return spec;
}

}  // namespace

std::vector<InputSpec> ParseInputSpecs(const std::string& text) {
  TORCH_CHECK(!text.empty(), "empty input spec; expected e.g. 64x512");
  std::vector<InputSpec> specs;
  for (const auto& part : Split(text, ',')) specs.push_back(ParseOne(part));
  return specs;
}

namespace {

c10::IValue MakeTensor(const InputSpec& spec, const std::string& argument) {
  TORCH_CHECK(!spec.shape.empty(), "input spec '", spec.text, "' gives a value, but ", argument,
              " is a tensor; give its shape, e.g. 8x64");
  auto options = at::TensorOptions().dtype(spec.dtype);
  if (spec.dtype == c10::kBool) return at::rand(spec.shape) > 0.5;  // a random mask
  if (spec.high > 0) return at::randint(spec.high, spec.shape, options);
  return at::randn(spec.shape, options);
}

// A non-tensor argument's value, as its type reads the spec's text.
c10::IValue ParseValue(const InputSpec& spec, const ForwardArgument& arg) {
  const std::string& t = spec.text;
  auto fail = [&](const char* what) {
    TORCH_CHECK(false, "input spec '", t, "' for argument '", arg.name, "' (", arg.type, ") is not ", what);
  };
  try {
    size_t used = 0;
    if (arg.type == "int" || arg.type == "Optional[int]") {
      int64_t v = std::stoll(t, &used);
      if (used != t.size()) fail("an integer");
      return v;
    }
    if (arg.type == "float" || arg.type == "Optional[float]") {
      double v = std::stod(t, &used);
      if (used != t.size()) fail("a number");
      return v;
    }
  } catch (const std::invalid_argument&) {
    fail("a number");
  } catch (const std::out_of_range&) {
    fail("a number in range");
  }
  if (arg.type == "bool" || arg.type == "Optional[bool]") {
    if (t == "true" || t == "True") return true;
    if (t == "false" || t == "False") return false;
    fail("true or false");
  }
  TORCH_CHECK(false, "argument '", arg.name, "' is a ", arg.type, ", which --sample-input cannot give; "
              "omit it to use its default");
}

}  // namespace

std::vector<c10::IValue> MakeSampleInputs(const std::vector<InputSpec>& specs) {
  std::vector<c10::IValue> inputs;
  for (size_t k = 0; k < specs.size(); ++k) inputs.push_back(MakeTensor(specs[k], "input " + std::to_string(k)));
  return inputs;
}

std::vector<std::optional<InputSpec>> AssignSpecs(const std::vector<InputSpec>& specs,
                                                  const std::vector<ForwardArgument>& signature) {
  std::vector<std::optional<InputSpec>> assigned(signature.size());
  size_t position = 0;
  for (const auto& spec : specs) {
    size_t k = position;
    if (spec.name.empty()) {
      TORCH_CHECK(position < signature.size(), "--sample-input gives ", specs.size(), " inputs but the model takes ",
                  signature.size(), ": ", SignatureText(signature));
      ++position;
    } else {
      for (k = 0; k < signature.size() && signature[k].name != spec.name; ++k) {
      }
      TORCH_CHECK(k < signature.size(), "--sample-input names '", spec.name, "', which is not an argument of ",
                  SignatureText(signature));
    }
    TORCH_CHECK(!assigned[k], "--sample-input gives argument '", signature[k].name, "' twice");
    assigned[k] = spec;
  }
  return assigned;
}

std::vector<c10::IValue> MakeSampleInputs(const std::vector<InputSpec>& specs,
                                          const std::vector<ForwardArgument>& signature) {
  std::vector<std::optional<InputSpec>> assigned = AssignSpecs(specs, signature);
  Kwargs given;
  for (size_t k = 0; k < signature.size(); ++k) {
    if (!assigned[k]) continue;
    const ForwardArgument& arg = signature[k];
    bool tensor = arg.is_tensor() || arg.type == "Any";
    given[arg.name] = tensor ? MakeTensor(*assigned[k], "argument '" + arg.name + "'") : ParseValue(*assigned[k], arg);
  }
  return BindArguments(signature, {}, given);
}

}  // namespace gpipe
