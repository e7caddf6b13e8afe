// gpipe-inspect: print an artifact's stage table and skip routes.

#include <cstdio>
#include <iostream>
#include <sstream>

#include <boost/program_options.hpp>
#include <torch/script.h>

#include "cli/cli_main.h"
#include "runtime/artifact.h"
#include "runtime/sample_input.h"

namespace po = boost::program_options;

namespace {

std::string Describe(const c10::IValue& v) {
  if (v.isTensor()) {
    std::ostringstream s;
    s << v.toTensor().sizes();
    return s.str();
  }
  return v.tagKind();
}

std::string SourceName(const gpipe::ValueSource& v) {
  if (v.origin == gpipe::ValueSource::Origin::ModelInput) return "input " + std::to_string(v.index);
  return "s" + std::to_string(v.stage) + "." + std::to_string(v.index);
}

std::string Bytes(int64_t n) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f MiB", static_cast<double>(n) / (1 << 20));
  return buffer;
}

int Main(int argc, char** argv) {
  std::string artifact, sample_input;
  po::options_description opts(
      "Usage: gpipe-inspect ART.gpipe [--sample-input SHAPE]\n"
      "Prints the stages of a pipelined artifact (device, nodes, parameters, inputs,\n"
      "outputs) and its skip routes. With --sample-input, runs the stages once in eval\n"
      "mode to show the shapes that cross each boundary.\n\nOptions");
  opts.add_options()
      ("help,h", "print this help and exit")
      ("artifact", po::value(&artifact), "artifact written by gpipe-compile (positional)")
      ("sample-input", po::value(&sample_input), "input shape(s) to show tensor shapes, e.g. 64x512");
  po::positional_options_description positional;
  positional.add("artifact", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(opts).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  po::notify(vm);
  if (artifact.empty()) throw po::error("the artifact file is missing");

  gpipe::ArtifactReader reader(artifact);
  const gpipe::Manifest& m = reader.manifest();
  std::vector<torch::jit::Module> modules;
  for (const auto& stage : m.stages) {
    std::istringstream bytes(reader.ReadRecord(stage.file));
    modules.push_back(torch::jit::load(bytes, c10::Device(c10::kCPU)));
  }
  // Optional: run once to learn the shapes (stages in order, no pipeline).
  std::vector<std::vector<c10::IValue>> outputs(m.stages.size());
  std::vector<c10::IValue> inputs;
  if (!sample_input.empty()) {
    torch::manual_seed(0);
    inputs = gpipe::MakeSampleInputs(gpipe::ParseInputSpecs(sample_input));
    torch::NoGradGuard no_grad;
    for (size_t s = 0; s < m.stages.size(); ++s) {
      std::vector<c10::IValue> args;
      for (const auto& v : m.stages[s].inputs) {
        args.push_back(v.origin == gpipe::ValueSource::Origin::ModelInput ? inputs.at(v.index)
                                                                         : outputs[v.stage].at(v.index));
      }
      modules[s].eval();
      outputs[s] = modules[s].forward(args).toTupleRef().elements().vec();
    }
  }
  auto shape_of = [&](const gpipe::ValueSource& v) -> std::string {
    if (inputs.empty()) return "";
    return " " + Describe(v.origin == gpipe::ValueSource::Origin::ModelInput ? inputs.at(v.index)
                                                                             : outputs[v.stage].at(v.index));
  };

  std::printf("%s: format %lld, from %s, %zu stages, chunks %lld, checkpoint %s\n", artifact.c_str(),
              static_cast<long long>(m.format_version), m.source_model.c_str(), m.stages.size(),
              static_cast<long long>(m.chunks), gpipe::ToString(m.checkpoint).c_str());
  for (size_t s = 0; s < m.stages.size(); ++s) {
    const auto& st = m.stages[s];
    int64_t elements = 0, bytes = 0;
    for (const auto& p : modules[s].parameters()) {
      elements += p.numel();
      bytes += p.numel() * static_cast<int64_t>(p.element_size());
    }
    size_t nodes = 0;
    for (auto* n : modules[s].get_method("forward").graph()->nodes()) nodes += n->kind() != c10::prim::Constant;
    std::string units;
    for (const auto& u : st.units) units += (units.empty() ? "" : ",") + u;
    std::printf("stage %zu  device %s  nodes %zu  parameters %lld (%s)%s  units %s\n", s, st.device.c_str(),
                nodes, static_cast<long long>(elements), Bytes(bytes).c_str(), st.uses_rng ? "  random" : "",
                units.c_str());
    for (size_t k = 0; k < st.inputs.size(); ++k) {
      std::printf("  in  %zu <- %s%s\n", k, SourceName(st.inputs[k]).c_str(), shape_of(st.inputs[k]).c_str());
    }
    for (int64_t k = 0; k < st.num_outputs; ++k) {
      gpipe::ValueSource self{gpipe::ValueSource::Origin::StageOutput, static_cast<int64_t>(s), k};
      std::printf("  out %lld%s\n", static_cast<long long>(k), shape_of(self).c_str());
    }
  }
  std::printf("skip routes (straight from producer to consumer, bypassing the stages between):\n");
  size_t routes = 0;
  for (size_t b = 0; b < m.stages.size(); ++b) {
    for (size_t k = 0; k < m.stages[b].inputs.size(); ++k) {
      const auto& v = m.stages[b].inputs[k];
      if (v.origin != gpipe::ValueSource::Origin::StageOutput || v.stage + 1 >= static_cast<int64_t>(b)) continue;
      std::printf("  stage %lld out %lld -> stage %zu in %zu%s\n", static_cast<long long>(v.stage),
                  static_cast<long long>(v.index), b, k, shape_of(v).c_str());
      ++routes;
    }
  }
  if (routes == 0) std::printf("  none\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpipe::RunCli("gpipe-inspect", [&] { return Main(argc, argv); });
}
