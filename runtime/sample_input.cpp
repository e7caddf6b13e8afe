#include "runtime/sample_input.h"

#include <sstream>

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

InputSpec ParseOne(const std::string& text) {
  InputSpec spec;
  spec.text = text;
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
    else TORCH_CHECK(false, "input spec '", text, "': unknown dtype '", t,
                     "'; use float32, float64, int64 or int32");
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

std::vector<c10::IValue> MakeSampleInputs(const std::vector<InputSpec>& specs) {
  std::vector<c10::IValue> inputs;
  for (const auto& spec : specs) {
    if (spec.high > 0) {
      inputs.emplace_back(at::randint(spec.high, spec.shape, at::TensorOptions().dtype(spec.dtype)));
    } else {
      inputs.emplace_back(at::randn(spec.shape, at::TensorOptions().dtype(spec.dtype)));
    }
  }
  return inputs;
}

}  // namespace gpipe
