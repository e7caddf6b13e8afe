#pragma once

#include <string>
#include <vector>

#include <optional>

#include <ATen/core/ivalue.h>

#include "runtime/model_interface.h"

namespace gpipe {

// One model input as given on the command line: "64x512" (float32),
// "8x128:int64:1000" (random ids in [0, 1000)), "32x3x224x224:float64", a
// number or true/false for a non-tensor argument, and any of these as
// "name=..." to give a forward argument by name ("mask=8x8:bool").
struct InputSpec {
  std::string name;  // empty: by position
  std::vector<int64_t> shape;  // empty for a plain value ("0.5", "true")
  c10::ScalarType dtype = c10::kFloat;
  int64_t high = 0;  // for integer inputs: values are drawn from [0, high)
  std::string text;  // what was written, without the name
};

// Parses a comma-separated list of specs; errors name the bad part.
std::vector<InputSpec> ParseInputSpecs(const std::string& text);

// Random inputs of those shapes from the default generator (seed it first for
// reproducible inputs), one per spec, in order.
std::vector<c10::IValue> MakeSampleInputs(const std::vector<InputSpec>& specs);

// The spec each argument of `signature` is given (by position, then by
// name); nullopt = omitted. Errors name the spec and the fix.
std::vector<std::optional<InputSpec>> AssignSpecs(const std::vector<InputSpec>& specs,
                                                  const std::vector<ForwardArgument>& signature);

// All of forward's arguments: random tensors and parsed values for the given
// specs (in argument order), defaults for the rest (see BindArguments).
std::vector<c10::IValue> MakeSampleInputs(const std::vector<InputSpec>& specs,
                                          const std::vector<ForwardArgument>& signature);

}  // namespace gpipe
