// Schedule builders. Each builder writes the per-worker action lists
// directly from the schedule's published recipe (warm-up count, steady
// alternation, cool-down) and leaves timing to the validator's simulation:
// the lists hold no idle slots, unlike PyTorch's `pipeline_order`, which pads
// with None to line ranks up. For example, 1F1B with 2 stages and 3
// micro-batches is
//
//   worker 0: 0F0 0F1 0B0 0F2 0B1 0B2
//   worker 1: 1F0 1B0 1F1 1B1 1F2 1B2
//
// and the simulation places them as
//
//   worker 0  0F0 0F1 .   0B0 0F2 0B1 .   0B2
//   worker 1  .   1F0 1B0 1F1 1B1 1F2 1B2 .

#include "runtime/schedule_ir.h"

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "runtime/schedule_validate.h"

namespace gpipe {
namespace {

// PyTorch's spelling of each kind, between the stage and the micro-batch.
const char* KindText(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendForward:
      return "SEND_F";
    case ActionKind::kRecvForward:
      return "RECV_F";
    case ActionKind::kSendBackward:
      return "SEND_B";
    case ActionKind::kRecvBackward:
      return "RECV_B";
  }
  return "?";
}

// The kind spelled at text[*pos], advancing *pos past it.
std::optional<ActionKind> ReadKind(const std::string& text, size_t* pos) {
  for (size_t k = 0; k < kNumActionKinds; ++k) {
    const auto kind = static_cast<ActionKind>(k);
    const std::string spelled = KindText(kind);
    if (text.compare(*pos, spelled.size(), spelled) == 0) {
      // "SEND_F" must not be read as a truncated kind: every spelling ends at a digit.
      const size_t end = *pos + spelled.size();
      if (end < text.size() && (text[end] < '0' || text[end] > '9')) continue;
      *pos = end;
      return kind;
    }
  }
  return std::nullopt;
}

// Reads the decimal number at text[*pos], advancing *pos; nullopt when there
// are no digits or the number does not fit in size_t.
std::optional<size_t> ReadNumber(const std::string& text, size_t* pos) {
  const size_t begin = *pos;
  size_t value = 0;
  while (*pos < text.size() && text[*pos] >= '0' && text[*pos] <= '9') {
    const size_t digit = static_cast<size_t>(text[*pos] - '0');
    if (value > (SIZE_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++*pos;
  }
  if (*pos == begin) return std::nullopt;
  return value;
}

// Checked before any list is built: a mistyped count (--micro-batches
// 100000000) must be a line, not gigabytes of actions and the kernel's kill.
void RequireWork(const char* schedule_name, size_t stages, size_t micro_batches) {
  if (stages == 0 || micro_batches == 0) {
    throw std::invalid_argument(std::string(schedule_name) + " got " + std::to_string(stages) +
                                " stages and " + std::to_string(micro_batches) +
                                " micro-batches; it needs at least one of each");
  }
  if (micro_batches > kMaxScheduledPairs / stages) {
    throw std::invalid_argument(
        std::string(schedule_name) + " got " + std::to_string(stages) + " stages and " +
        std::to_string(micro_batches) + " micro-batches, more than the " +
        std::to_string(kMaxScheduledPairs) +
        " (stage, micro-batch) pairs a schedule may hold; use fewer micro-batches (at most " +
        std::to_string(kMaxScheduledPairs / stages) + " for " + std::to_string(stages) +
        " stages)");
  }
}

// One worker per stage, worker w running stage w.
Schedule OneStagePerWorker(const char* schedule_name, size_t stages, size_t micro_batches) {
  RequireWork(schedule_name, stages, micro_batches);
  Schedule schedule;
  schedule.name = schedule_name;
  schedule.num_stages = stages;
  schedule.num_micro_batches = micro_batches;
  schedule.num_workers = stages;
  schedule.actions.resize(stages);
  for (size_t stage = 0; stage < stages; ++stage) schedule.worker_of_stage.push_back(stage);
  return schedule;
}

// "use 4 or 8 micro-batches" for 6 with a group of 4; "use 4" below one group.
std::string NearestMultiples(size_t value, size_t factor, const char* unit) {
  const size_t below = value / factor * factor;
  const std::string above = std::to_string(below + factor);
  if (below == 0) return "use " + above + " " + unit;
  return "use " + std::to_string(below) + " or " + above + " " + unit;
}

}  // namespace

bool IsCommunication(ActionKind kind) {
  return kind == ActionKind::kSendForward || kind == ActionKind::kRecvForward ||
         kind == ActionKind::kSendBackward || kind == ActionKind::kRecvBackward;
}

bool IsForwardDirection(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kSendForward ||
         kind == ActionKind::kRecvForward;
}

std::string ToString(const Action& action) {
  return std::to_string(action.stage) + KindText(action.kind) + std::to_string(action.micro_batch);
}

std::optional<Action> ParseAction(const std::string& text) {
  size_t pos = 0;
  const std::optional<size_t> stage = ReadNumber(text, &pos);
  if (!stage || pos >= text.size()) return std::nullopt;
  const std::optional<ActionKind> kind = ReadKind(text, &pos);
  if (!kind) return std::nullopt;
  const std::optional<size_t> micro_batch = ReadNumber(text, &pos);
  if (!micro_batch || pos != text.size()) return std::nullopt;
  return Action{*kind, *stage, *micro_batch};
}

Schedule BuildGpipe(size_t stages, size_t micro_batches) {
  Schedule schedule = OneStagePerWorker("gpipe", stages, micro_batches);
  for (size_t stage = 0; stage < stages; ++stage) {
    std::vector<Action>& list = schedule.actions[stage];
    for (size_t mb = 0; mb < micro_batches; ++mb) {
      list.push_back({ActionKind::kForward, stage, mb});
    }
    for (size_t mb = 0; mb < micro_batches; ++mb) {
      list.push_back({ActionKind::kBackward, stage, mb});
    }
  }
  return schedule;
}

Schedule Build1F1B(size_t stages, size_t micro_batches) {
  Schedule schedule = OneStagePerWorker("1f1b", stages, micro_batches);
  for (size_t stage = 0; stage < stages; ++stage) {
    std::vector<Action>& list = schedule.actions[stage];
    // Enough forwards that the first backward reaches this stage just as the
    // warm-up ends: one per later stage.
    const size_t warmup = std::min(stages - 1 - stage, micro_batches);
    for (size_t mb = 0; mb < warmup; ++mb) list.push_back({ActionKind::kForward, stage, mb});
    for (size_t mb = 0; mb < micro_batches - warmup; ++mb) {
      list.push_back({ActionKind::kForward, stage, warmup + mb});
      list.push_back({ActionKind::kBackward, stage, mb});
    }
    for (size_t mb = micro_batches - warmup; mb < micro_batches; ++mb) {
      list.push_back({ActionKind::kBackward, stage, mb});
    }
  }
  return schedule;
}

Schedule BuildInterleaved1F1B(size_t workers, size_t virtual_stages, size_t micro_batches) {
  RequireWork("interleaved-1f1b", workers * virtual_stages, micro_batches);
  if (micro_batches % workers != 0) {
    throw std::invalid_argument(
        "interleaved-1f1b runs micro-batches in groups of the worker count (" +
        std::to_string(workers) + "), but got " + std::to_string(micro_batches) +
        " micro-batches; " + NearestMultiples(micro_batches, workers, "micro-batches"));
  }
  Schedule schedule;
  schedule.name = "interleaved-1f1b";
  schedule.num_stages = workers * virtual_stages;
  schedule.num_micro_batches = micro_batches;
  schedule.num_workers = workers;
  schedule.actions.resize(workers);
  for (size_t stage = 0; stage < schedule.num_stages; ++stage) {
    schedule.worker_of_stage.push_back(stage % workers);
  }

  // The k-th forward (backward) of a worker: k walks the groups of `workers`
  // micro-batches, each group through every chunk in turn (in reverse for
  // backward) before the next group starts.
  const size_t group_actions = workers * virtual_stages;
  auto micro_batch_of = [&](size_t k) { return k / group_actions * workers + k % workers; };
  auto chunk_of = [&](size_t k) { return k / workers % virtual_stages; };
  const size_t per_worker = virtual_stages * micro_batches;
  for (size_t worker = 0; worker < workers; ++worker) {
    std::vector<Action>& list = schedule.actions[worker];
    auto forward = [&](size_t k) {
      list.push_back({ActionKind::kForward, chunk_of(k) * workers + worker, micro_batch_of(k)});
    };
    auto backward = [&](size_t k) {
      const size_t chunk = virtual_stages - 1 - chunk_of(k);
      list.push_back({ActionKind::kBackward, chunk * workers + worker, micro_batch_of(k)});
    };
    // The first backward of the last chunk needs a full group through every
    // earlier chunk, plus two steps (F then B) per later worker.
    const size_t warmup =
        std::min((virtual_stages - 1) * workers + 2 * (workers - 1 - worker), per_worker);
    for (size_t k = 0; k < warmup; ++k) forward(k);
    for (size_t k = 0; k < per_worker - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (size_t k = per_worker - warmup; k < per_worker; ++k) backward(k);
  }
  return schedule;
}

Schedule BuildZeroBubbleH1(size_t stages, size_t micro_batches) {
  Schedule schedule = OneStagePerWorker("zb-h1", stages, micro_batches);
  for (size_t stage = 0; stage < stages; ++stage) {
    std::vector<Action>& list = schedule.actions[stage];
    const size_t warmup = std::min(stages - 1 - stage, micro_batches);
    // The later the worker, the more slack 1F1B leaves it (it holds fewer
    // micro-batches), so the more W's it can hold back for the cool-down.
    const size_t held_back_weights = stage;
    size_t next_weight = 0;
    auto input_then_weight = [&](size_t mb) {
      list.push_back({ActionKind::kBackwardInput, stage, mb});
      if (mb >= held_back_weights) {
        list.push_back({ActionKind::kBackwardWeight, stage, next_weight++});
      }
    };
    for (size_t mb = 0; mb < warmup; ++mb) list.push_back({ActionKind::kForward, stage, mb});
    for (size_t mb = 0; mb < micro_batches - warmup; ++mb) {
      list.push_back({ActionKind::kForward, stage, warmup + mb});
      input_then_weight(mb);
    }
    for (size_t mb = micro_batches - warmup; mb < micro_batches; ++mb) input_then_weight(mb);
    while (next_weight < micro_batches) {
      list.push_back({ActionKind::kBackwardWeight, stage, next_weight++});
    }
  }
  return schedule;
}

Schedule BuildSchedule(const std::string& name, size_t stages, size_t micro_batches,
                       size_t virtual_stages) {
  if (name == "interleaved-1f1b") {
    if (virtual_stages == 0 || stages % virtual_stages != 0) {
      throw std::invalid_argument(
          "interleaved-1f1b needs the stage count (" + std::to_string(stages) +
          ") to be a multiple of the virtual stages per worker (" + std::to_string(virtual_stages) +
          "); " +
          (virtual_stages == 0 ? std::string("use at least 1 virtual stage")
                               : NearestMultiples(stages, virtual_stages, "stages")));
    }
    return BuildInterleaved1F1B(stages / virtual_stages, virtual_stages, micro_batches);
  }
  if (name != "gpipe" && name != "1f1b" && name != "zb-h1") {
    throw std::invalid_argument("unknown schedule '" + name +
                                "'; use gpipe, 1f1b, interleaved-1f1b or zb-h1");
  }
  if (virtual_stages != 1) {
    throw std::invalid_argument("schedule '" + name + "' runs one stage per worker but got " +
                                std::to_string(virtual_stages) +
                                " virtual stages; use 1, or use interleaved-1f1b");
  }
  if (name == "gpipe") return BuildGpipe(stages, micro_batches);
  if (name == "1f1b") return Build1F1B(stages, micro_batches);
  return BuildZeroBubbleH1(stages, micro_batches);
}

std::string FormatTable(const Schedule& schedule, const StageFlow* flow) {
  const ScheduleStats stats = flow ? ValidateSchedule(schedule, *flow) : ValidateSchedule(schedule);
  std::vector<std::vector<std::string>> cells(schedule.num_workers,
                                              std::vector<std::string>(stats.time_steps, "."));
  size_t width = std::to_string(stats.time_steps == 0 ? 0 : stats.time_steps - 1).size();
  for (size_t worker = 0; worker < schedule.num_workers; ++worker) {
    for (size_t i = 0; i < schedule.actions[worker].size(); ++i) {
      std::string text = ToString(schedule.actions[worker][i]);
      width = std::max(width, text.size());
      cells[worker][*stats.start_step[worker][i]] = std::move(text);
    }
  }
  const std::string last_label = "worker " + std::to_string(schedule.num_workers - 1);
  const size_t label_width = std::max(last_label.size(), std::string("step").size());

  std::vector<std::string> lines;
  auto add_line = [&](const std::string& label, const std::vector<std::string>& row) {
    std::ostringstream line;
    line << std::left << std::setw(static_cast<int>(label_width)) << label;
    for (const std::string& cell : row) {
      line << ' ' << std::setw(static_cast<int>(width)) << cell;
    }
    std::string text = line.str();
    text.erase(text.find_last_not_of(' ') + 1);  // no trailing spaces
    lines.push_back(std::move(text));
  };
  std::vector<std::string> step_numbers;
  for (size_t step = 0; step < stats.time_steps; ++step) {
    step_numbers.push_back(std::to_string(step));
  }
  add_line("step", step_numbers);
  for (size_t worker = 0; worker < schedule.num_workers; ++worker) {
    add_line("worker " + std::to_string(worker), cells[worker]);
  }

  std::ostringstream out;
  out << schedule.name << ": " << schedule.num_stages << " stages, " << schedule.num_micro_batches
      << " micro-batches, " << schedule.num_workers << " workers\n";
  for (const std::string& line : lines) out << line << '\n';
  out << "bubble fraction " << std::fixed << std::setprecision(3) << stats.bubble_fraction
      << "; peak in-flight per worker:";
  for (size_t peak : stats.peak_in_flight) out << ' ' << peak;
  out << '\n';
  return out.str();
}

bool ReadsFromAnotherRank(size_t s, const StageFlow& flow, const std::vector<int>& rank_of_stage) {
  if (rank_of_stage.empty()) return false;
  for (size_t p : flow.reads_from[s]) {
    if (rank_of_stage[p] != rank_of_stage[s]) return true;
  }
  return false;
}

bool ReadByAnotherRank(size_t s, const StageFlow& flow, const std::vector<int>& rank_of_stage) {
  if (rank_of_stage.empty()) return false;
  for (size_t c : flow.read_by[s]) {
    if (rank_of_stage[c] != rank_of_stage[s]) return true;
  }
  // The model's outputs are gathered on the last stage's rank (RankPlan).
  return flow.feeds_loss[s] && rank_of_stage.back() != rank_of_stage[s];
}

StageFlow StageFlow::Chain(size_t stages) {
  StageFlow flow;
  flow.num_stages = stages;
  flow.reads_from.resize(stages);
  flow.read_by.resize(stages);
  flow.feeds_loss.assign(stages, false);
  for (size_t s = 1; s < stages; ++s) {
    flow.reads_from[s].push_back(s - 1);
    flow.read_by[s - 1].push_back(s);
  }
  return flow;
}

}  // namespace gpipe
