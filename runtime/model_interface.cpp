#include "runtime/model_interface.h"

#include <sstream>

#include <c10/util/Exception.h>

namespace gpipe {
namespace {

const std::vector<std::pair<c10::ScalarType, const char*>>& DtypeNames() {
  static const std::vector<std::pair<c10::ScalarType, const char*>> names = {
      {c10::kFloat, "float32"},     {c10::kDouble, "float64"}, {c10::kHalf, "float16"},
      {c10::kBFloat16, "bfloat16"}, {c10::kLong, "int64"},     {c10::kInt, "int32"},
      {c10::kShort, "int16"},       {c10::kChar, "int8"},      {c10::kByte, "uint8"},
      {c10::kBool, "bool"}};
  return names;
}

std::string Shape(at::IntArrayRef sizes, bool batch_as_n) {
  std::string text = "[";
  for (size_t d = 0; d < sizes.size(); ++d) {
    text += (d ? ", " : "") + (d == 0 && batch_as_n ? std::string("N") : std::to_string(sizes[d]));
  }
  return text + "]";
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

// Equal plain values (None, bool, int, float, str); a tensor never equals a default.
bool SameValue(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() || b.isTensor()) return false;
  if (a.isNone() || b.isNone()) return a.isNone() && b.isNone();
  return a == b;
}

std::string ValueText(const c10::IValue& value) {
  std::ostringstream text;
  text << value;
  return text.str();
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

}  // namespace

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
    c10::IValue value = Coerce(arg, std::move(*bound[k]));
    TORCH_CHECK(!arg.specialized || SameValue(value, *arg.default_value), "argument '", arg.name,
                "' was fixed to its default ", ValueText(*arg.default_value),
                " when the model was compiled (forward branches on it around its layers, and no "
                "--sample-input gave it); recompile with --sample-input ", arg.name, "=... to pass it");
    inputs.push_back(std::move(value));
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

}  // namespace gpipe
