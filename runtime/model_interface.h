#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace gpipe {

// What the original model's forward takes and returns, as the artifact
// records it, so that a pipeline is called like the model: arguments by
// position or name with their defaults, and results in the model's own
// structure (tuples, lists, dicts, None).

// One argument of the original forward (after `self`).
struct ForwardArgument {
  std::string name;
  std::string type =
      "Tensor";  // TorchScript annotation: Tensor, Optional[Tensor], int, List[int], ...
  std::optional<c10::IValue> default_value;  // None, bool, int, float, str or a list of numbers
  bool batched = true;  // a tensor given for it is split into micro-batches along dim 0
  // A tensor argument as seen at compile time (--sample-input): its dtype and
  // shape (sizes[0] is the batch); unset/empty when no sample was given.
  std::optional<c10::ScalarType> sample_dtype;
  std::vector<int64_t> sample_sizes;
  // Fixed to its default at compile time: forward branched on it around its
  // layers and no sample gave it (SpecializeArguments). Another value is an error.
  bool specialized = false;

  bool is_tensor() const { return type == "Tensor" || type == "Optional[Tensor]"; }
};

// The structure forward returns; its tensor leaves are the model outputs
// (Manifest::outputs), numbered in order.
struct OutputStructure {
  enum class Kind { Leaf, Tuple, List, Dict, Constant };
  Kind kind = Kind::Leaf;
  size_t leaf = 0;                // Leaf: index of the model output
  std::vector<std::string> keys;  // Dict: its keys; Tuple: a NamedTuple's field names (or none)
  std::vector<OutputStructure> elements;
  c10::IValue constant;  // Constant: None, bool, int, float or str

  static OutputStructure Leaf(size_t index);
  // A single output as itself, several as a tuple: what artifacts written
  // before the structure was recorded return.
  static OutputStructure Default(size_t num_outputs);
};

using Kwargs = std::unordered_map<std::string, c10::IValue>;

// The full positional argument list: `args` by position, `kwargs` by name,
// defaults for the rest. Errors name the argument and the fix.
std::vector<c10::IValue> BindArguments(const std::vector<ForwardArgument>& signature,
                                       std::vector<c10::IValue> args, const Kwargs& kwargs = {});

// "float32", "int64", ... (and back; nullopt for an unknown name).
std::string DtypeName(c10::ScalarType type);
std::optional<c10::ScalarType> DtypeFromName(const std::string& name);

// "forward(x: Tensor, mask: Optional[Tensor] = None)"
std::string SignatureText(const std::vector<ForwardArgument>& signature);

// Upfront checks of bound tensor arguments against what was seen at compile
// time: the kind of dtype (floating vs integer) and the number of dims.
void CheckArguments(const std::vector<ForwardArgument>& signature,
                    const std::vector<c10::IValue>& inputs);

// After the model failed on `inputs`: the first tensor argument whose dtype
// or non-batch sizes differ from the compile-time sample, as one line naming
// it, what it got, what it expects and the fix; nullopt when all match.
std::optional<std::string> DescribeMismatch(const std::vector<ForwardArgument>& signature,
                                            const std::vector<c10::IValue>& inputs);

// The model's result from its flat outputs (an undefined tensor is None).
c10::IValue RebuildOutput(const OutputStructure& structure, const std::vector<at::Tensor>& outputs);

// Every leaf of a result (tensors, None, scalars) with its path: "out" for a
// lone tensor, "out[1]" in a tuple or list, "logits" in a dict at the top,
// "out[0].logits" deeper.
std::vector<std::pair<std::string, c10::IValue>> FlattenWithPaths(const c10::IValue& value);

}  // namespace gpipe
