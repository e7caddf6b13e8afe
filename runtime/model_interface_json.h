#pragma once

// The manifest's JSON for the model interface (manifest.cpp only; the
// runtime's public headers stay free of the JSON library).

#include <nlohmann/json.hpp>

#include "runtime/model_interface.h"

namespace gpipe {

// Errors name the field (a damaged artifact says so).
nlohmann::json ArgumentsToJson(const std::vector<ForwardArgument>& signature);
std::vector<ForwardArgument> ArgumentsFromJson(const nlohmann::json& j);
nlohmann::json OutputStructureToJson(const OutputStructure& structure);
OutputStructure OutputStructureFromJson(const nlohmann::json& j, size_t num_outputs);

}  // namespace gpipe
