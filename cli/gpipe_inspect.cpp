// gpipe-inspect: print an artifact's stage table and skip routes.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <boost/program_options.hpp>
#include <torch/script.h>

#include "cli/cli_main.h"
#include "runtime/artifact.h"
#include "runtime/rank_plan.h"
#include "runtime/recompute.h"
#include "runtime/sample_input.h"
#include "runtime/schedule_csv.h"
#include "runtime/schedule_ir.h"
#include "runtime/schedule_lowering.h"
#include "runtime/stage.h"

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

// Per-stage sums of the recorded unit costs (empty if the plan was not profiled).
std::vector<double> StageCosts(const gpipe::Manifest& m) {
  std::vector<double> costs;
  if (m.unit_costs.empty()) return costs;
  size_t unit = 0;
  for (const auto& st : m.stages) {
    double c = 0;
    for (size_t k = 0; k < st.units.size() && unit < m.unit_costs.size(); ++k) c += m.unit_costs[unit++];
    costs.push_back(c);
  }
  return costs;
}

std::string CostText(const gpipe::Manifest& m, double cost) {
  char buffer[32];
  if (m.balance_method == "time") std::snprintf(buffer, sizeof buffer, "%.2f ms", cost);
  else std::snprintf(buffer, sizeof buffer, "%.1f MiB", cost / (1 << 20));
  return buffer;
}

// What --checkpoint selective (or budget) keeps of a stage and what it recomputes, read
// from its recompute method: each gpipe::saved_* op stands for a kept product.
std::string SelectivePlan(const torch::jit::Graph& recompute) {
  std::map<std::string, int> kept;
  int recomputed = 0;
  for (const torch::jit::Node* node : recompute.nodes()) {
    const std::string kind = node->kind().toQualString();
    if (kind.rfind("gpipe::saved_", 0) == 0)
      ++kept[kind.substr(13)];
    else if (node->kind().is_aten() || kind == "gpipe::linear")
      ++recomputed;
  }
  std::string text = "keeps";
  for (const auto& [kind, count] : kept) text += " " + std::to_string(count) + " " + kind;
  if (kept.empty()) text += " nothing";
  return text + ", recomputes " + std::to_string(recomputed) + " ops";
}

std::string PlanDot(const gpipe::Manifest& m, const std::vector<double>& stage_costs) {
  std::ostringstream dot;
  dot << "digraph plan {\n  rankdir=LR;\n  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n";
  dot << "  input [shape=oval, label=\"input\"];\n  output [shape=oval, label=\"output\"];\n";
  for (size_t s = 0; s < m.stages.size(); ++s) {
    const auto& st = m.stages[s];
    std::string units = st.units.empty() ? "" : st.units.front() + (st.units.size() > 1 ? " .. " + st.units.back() : "");
    dot << "  s" << s << " [label=\"stage " << s << " (" << st.device << ")\\n" << st.units.size()
        << " units: " << units;
    if (!stage_costs.empty()) dot << "\\n" << CostText(m, stage_costs[s]);
    dot << "\"];\n";
  }
  auto edge = [&](const gpipe::ValueSource& v, const std::string& to, int64_t consumer) {
    std::string from = v.origin == gpipe::ValueSource::Origin::ModelInput ? "input" : "s" + std::to_string(v.stage);
    bool skip = v.origin == gpipe::ValueSource::Origin::StageOutput && v.stage + 1 < consumer;
    dot << "  " << from << " -> " << to << (skip ? " [style=dashed, color=blue, label=\"skip\"]" : "") << ";\n";
  };
  for (size_t s = 0; s < m.stages.size(); ++s) {
    for (const auto& v : m.stages[s].inputs) edge(v, "s" + std::to_string(s), static_cast<int64_t>(s));
  }
  for (const auto& v : m.outputs) edge(v, "output", static_cast<int64_t>(m.stages.size()));
  dot << "}\n";
  return dot.str();
}

int Main(int argc, char** argv) {
  std::string artifact, sample_input, dot_path, svg_path, schedule, ranks;
  int64_t micro_batches = 0, virtual_stages = 1;
  po::options_description opts(
      "Usage: gpipe-inspect ART.gpipe [--sample-input SHAPE]\n"
      "Prints the stages of a pipelined artifact (device, nodes, parameters, inputs,\n"
      "outputs) and its skip routes. With --sample-input, runs the stages once in eval\n"
      "mode to show the shapes that cross each boundary.\n\nOptions");
  // clang-format off
  opts.add_options()
      ("help,h", "print this help and exit")
      ("artifact", po::value(&artifact), "artifact written by gpipe-compile (positional)")
      ("sample-input", po::value(&sample_input), "input shape(s) to show tensor shapes, e.g. 64x512")
      ("dot", po::value(&dot_path), "write the plan as a Graphviz graph: stages, their costs, and the "
       "values between them (skip routes dashed)")
      ("svg", po::value(&svg_path), "also render it to SVG with Graphviz's dot (Debian package graphviz)")
      ("schedule", po::value(&schedule), "print the action table (worker x time step) of a schedule for "
       "these stages: gpipe, 1f1b, interleaved-1f1b, zb-h1, or a CSV file; with its bubble fraction and "
       "each worker's peak in-flight micro-batches (gpipe-run --train --schedule runs any of them)")
      ("micro-batches", po::value(&micro_batches), "micro-batches for --schedule (default: the artifact's chunks)")
      ("virtual-stages", po::value(&virtual_stages)->default_value(1), "stages per worker for "
       "--schedule interleaved-1f1b (it must divide the stage count)")
      ("ranks", po::value(&ranks), "with --schedule: the rank running each stage, as gpipe-run "
       "--distributed --ranks takes it (e.g. 0,0,1,1); the table then shows the SEND_F/RECV_F/SEND_B/RECV_B "
       "actions that move values between ranks, as each rank runs them");
  // clang-format on
  po::variables_map vm;
  if (!gpipe::ParseCommandLine(argc, argv, opts, "artifact", vm)) return 0;
  if (artifact.empty()) throw po::error("the artifact file is missing");
  if (vm.count("ranks") && schedule.empty()) throw po::error("--ranks needs --schedule");
  if (!svg_path.empty() && dot_path.empty()) dot_path = svg_path + ".dot";

  // Stage modules call the runtime's `gpipe::` ops: this links their registration in.
  (void)gpipe::is_recomputing();
  gpipe::ArtifactReader reader(artifact);
  const gpipe::Manifest& m = reader.manifest();
  std::vector<torch::jit::Module> modules;
  for (const auto& stage : m.stages) {
    std::istringstream bytes(reader.ReadRecord(stage.file));
    modules.push_back(torch::jit::load(bytes, c10::Device(c10::kCPU)));
  }
  // Optional: run once to learn the shapes (stages in order, no pipeline).
  std::vector<std::vector<c10::IValue>> outputs(m.stages.size());
  std::vector<int64_t> saved_bytes(m.stages.size(), 0);  // selective: what forward keeps
  std::vector<c10::IValue> inputs;
  if (!sample_input.empty()) {
    torch::manual_seed(0);
    inputs = gpipe::MakeSampleInputs(gpipe::ParseInputSpecs(sample_input), m.arguments);
    torch::NoGradGuard no_grad;
    for (size_t s = 0; s < m.stages.size(); ++s) {
      std::vector<c10::IValue> args;
      for (const auto& v : m.stages[s].inputs) {
        args.push_back(v.origin == gpipe::ValueSource::Origin::ModelInput ? inputs.at(v.index)
                                                                         : outputs[v.stage].at(v.index));
      }
      modules[s].eval();
      if (!modules[s].find_method(gpipe::kForwardSavingMethod)) {
        outputs[s] = modules[s].forward(args).toTupleRef().elements().vec();
        continue;
      }
      auto results =
          modules[s].get_method(gpipe::kForwardSavingMethod)(args).toTupleRef().elements().vec();
      for (size_t k = static_cast<size_t>(m.stages[s].num_outputs); k < results.size(); ++k) {
        const at::Tensor& t = results[k].toTensor();
        saved_bytes[s] += t.numel() * static_cast<int64_t>(t.element_size());
      }
      results.resize(static_cast<size_t>(m.stages[s].num_outputs));
      outputs[s] = std::move(results);
    }
  }
  auto shape_of = [&](const gpipe::ValueSource& v) -> std::string {
    if (inputs.empty()) return "";
    return " " + Describe(v.origin == gpipe::ValueSource::Origin::ModelInput ? inputs.at(v.index)
                                                                             : outputs[v.stage].at(v.index));
  };

  std::vector<double> stage_costs = StageCosts(m);
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
    std::string cost;
    if (!stage_costs.empty()) cost = "  cost " + CostText(m, stage_costs[s]);
    std::string device = st.device + (st.rank >= 0 ? "  rank " + std::to_string(st.rank) : "");
    std::printf("stage %zu  device %s  nodes %zu  parameters %lld (%s)%s%s  units %s\n", s, device.c_str(),
                nodes, static_cast<long long>(elements), gpipe::MiB(bytes).c_str(), st.uses_rng ? "  random" : "",
                cost.c_str(), units.c_str());
    for (size_t k = 0; k < st.inputs.size(); ++k) {
      std::printf("  in  %zu <- %s%s\n", k, SourceName(st.inputs[k]).c_str(), shape_of(st.inputs[k]).c_str());
    }
    for (int64_t k = 0; k < st.num_outputs; ++k) {
      gpipe::ValueSource self{gpipe::ValueSource::Origin::StageOutput, static_cast<int64_t>(s), k};
      std::printf("  out %lld%s\n", static_cast<long long>(k), shape_of(self).c_str());
    }
    if (modules[s].find_method(gpipe::kRecomputeMethod)) {
      std::string kept = SelectivePlan(*modules[s].get_method(gpipe::kRecomputeMethod).graph());
      if (!inputs.empty()) {
        kept +=
            ", " + gpipe::MiB(saved_bytes[s] / std::max<int64_t>(1, m.chunks)) + " per micro-batch";
      }
      if (st.planned_kept_bytes) {  // --activation-budget: its prediction from the compile-time
                                    // sample
        char predicted[96];
        std::snprintf(predicted, sizeof predicted,
                      "; predicted %s per micro-batch with outputs, %.2f GFLOP "
                      "of products recomputed",
                      gpipe::MiB(*st.planned_kept_bytes).c_str(),
                      st.planned_recompute_flops.value_or(0) / 1e9);
        kept += predicted;
      }
      std::printf("  %s: %s\n", m.activation_budget_mib ? "budget" : "selective", kept.c_str());
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
  if (!stage_costs.empty()) {
    std::printf("balanced by %s over %zu units at the costs the manifest records\n",
                m.balance_method.c_str(), m.unit_names.size());
  }
  if (!dot_path.empty()) {
    gpipe::WriteFileAtomically(dot_path, PlanDot(m, stage_costs));
    std::printf("wrote %s\n", dot_path.c_str());
  }
  if (!schedule.empty()) {
    if (micro_batches == 0) micro_batches = m.chunks;
    TORCH_CHECK(micro_batches > 0, "--micro-batches must be at least 1, not ", micro_batches);
    TORCH_CHECK(virtual_stages > 0, "--virtual-stages must be at least 1, not ", virtual_stages);
    const gpipe::Schedule compute =
        gpipe::LoadSchedule(schedule, m.stages.size(), static_cast<size_t>(micro_batches),
                            static_cast<size_t>(virtual_stages));
    if (ranks.empty()) {
      std::printf("%s", gpipe::FormatTable(compute).c_str());
    } else {
      const std::vector<int> rank_of_stage = gpipe::ParseRanks(gpipe::SplitList(ranks));
      TORCH_CHECK(rank_of_stage.size() == m.stages.size(), "--ranks lists ", rank_of_stage.size(),
                  " ranks but the artifact has ", m.stages.size(),
                  " stages; give one rank per stage");
      const gpipe::StageFlow flow = gpipe::StageFlowOf(m);
      std::printf(
          "%s",
          gpipe::FormatTable(gpipe::AddCommunication(compute, flow, rank_of_stage), &flow).c_str());
    }
  }
  if (!svg_path.empty()) {
    std::string command = "dot -Tsvg '" + dot_path + "' -o '" + svg_path + "'";
    TORCH_CHECK(std::system("command -v dot >/dev/null 2>&1") == 0,
                "--svg needs Graphviz's dot; install the Debian package graphviz, or use --dot alone");
    TORCH_CHECK(std::system(command.c_str()) == 0, "dot failed to render ", dot_path);
    std::printf("wrote %s\n", svg_path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpipe::RunCli("gpipe-inspect", [&] { return Main(argc, argv); });
}
