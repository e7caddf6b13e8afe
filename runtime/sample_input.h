#pragma once

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

namespace gpipe {

// One model input as given on the command line: "64x512" (float32),
// "8x128:int64:1000" (random ids in [0, 1000)), "32x3x224x224:float64".
struct InputSpec {
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::kFloat;
  int64_t high = 0;  // for integer inputs: values are drawn from [0, high)
  std::string text;
};

// Parses a comma-separated list of specs; errors name the bad part.
std::vector<InputSpec> ParseInputSpecs(const std::string& text);

// Random inputs of those shapes from the default generator (seed it first for
// reproducible inputs).
std::vector<c10::IValue> MakeSampleInputs(const std::vector<InputSpec>& specs);

}  // namespace gpipe
