#include "runtime/schedule_csv.h"

#include <c10/util/Exception.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace gpipe {
namespace {

std::string Trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r") + 1 - begin);
}

std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t end; (end = text.find(separator, begin)) != std::string::npos; begin = end + 1) {
    parts.push_back(text.substr(begin, end - begin));
  }
  parts.push_back(text.substr(begin));
  return parts;
}

// A row of empty cells only (",,") is as blank as an empty line: PyTorch
// writes idle steps as empty cells, and trailing blank rows are no workers.
bool IsBlankRow(const std::string& line) {
  for (const std::string& cell : Split(line, ',')) {
    if (!Trim(cell).empty()) return false;
  }
  return true;
}

// "plan.csv:2:3"
std::string Location(std::string_view source, size_t row, size_t column) {
  return std::string(source) + ":" + std::to_string(row) + ":" + std::to_string(column);
}

// A cell as an error quotes it: printable ASCII only (anything else as '?'),
// at most 24 characters, so a binary or huge cell cannot flood a terminal.
std::string Quoted(const std::string& cell) {
  constexpr size_t kShown = 24;
  std::string shown = "'";
  for (char c : cell.substr(0, kShown)) shown += c >= 0x20 && c < 0x7f ? c : '?';
  shown += "'";
  if (cell.size() > kShown) shown += "... (" + std::to_string(cell.size()) + " bytes)";
  return shown;
}

}  // namespace

std::string WriteScheduleCsv(const Schedule& schedule) {
  std::string text;
  for (const std::vector<Action>& list : schedule.actions) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (i > 0) text += ',';
      text += ToString(list[i]);
    }
    text += '\n';
  }
  return text;
}

Schedule ReadScheduleCsv(const std::string& text, size_t num_stages, std::string_view source_name) {
  // A byte-order mark (spreadsheets write one) is not part of the first cell.
  const std::string kBom = "\xEF\xBB\xBF";
  std::vector<std::string> lines =
      Split(text.compare(0, kBom.size(), kBom) == 0 ? text.substr(kBom.size()) : text, '\n');
  while (!lines.empty() && IsBlankRow(lines.back())) lines.pop_back();

  Schedule schedule;
  schedule.name = std::string(source_name);
  schedule.num_stages = num_stages;
  schedule.num_workers = lines.size();
  schedule.actions.resize(lines.size());
  schedule.worker_of_stage.resize(num_stages);
  // Where each stage was first seen, to name both places when it reappears.
  std::vector<std::optional<std::string>> first_seen(num_stages);
  std::optional<size_t> largest_micro_batch;
  std::string largest_micro_batch_at;
  size_t action_count = 0;

  for (size_t worker = 0; worker < lines.size(); ++worker) {
    const size_t row = worker + 1;
    const std::vector<std::string> cells = Split(lines[worker], ',');
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string cell = Trim(cells[i]);
      if (cell.empty()) continue;
      const std::string where = Location(source_name, row, i + 1);
      const std::optional<Action> action = ParseAction(cell);
      if (!action) {
        throw std::invalid_argument(Quoted(cell) + " at " + where +
                                    " is not an action; write STAGE F|B|I|W MICRO_BATCH, e.g. 1F0");
      }
      if (action->stage >= num_stages) {
        throw std::invalid_argument("'" + cell + "' at " + where + " names stage " +
                                    std::to_string(action->stage) + " but the model has " +
                                    std::to_string(num_stages) + " stages; use a stage below " +
                                    std::to_string(num_stages));
      }
      std::optional<std::string>& seen = first_seen[action->stage];
      if (!seen) {
        seen = where;
        schedule.worker_of_stage[action->stage] = worker;
      } else if (schedule.worker_of_stage[action->stage] != worker) {
        throw std::invalid_argument("'" + cell + "' at " + where + " puts stage " +
                                    std::to_string(action->stage) +
                                    " on a second worker (it is also at " + *seen +
                                    "); keep each stage's actions in one row");
      }
      if (!largest_micro_batch || action->micro_batch > *largest_micro_batch) {
        largest_micro_batch = action->micro_batch;
        largest_micro_batch_at = "'" + cell + "' at " + where;
      }
      schedule.actions[worker].push_back(*action);
      ++action_count;
    }
  }
  for (size_t stage = 0; stage < num_stages; ++stage) {
    if (!first_seen[stage]) {
      throw std::invalid_argument(std::string(source_name) + " has no actions for stage " +
                                  std::to_string(stage) + "; add them to one row");
    }
  }
  // Every micro-batch needs at least one action, so a larger number is a
  // typo; catching it here keeps the validator from sizing its tables by it.
  if (largest_micro_batch && *largest_micro_batch >= action_count) {
    throw std::invalid_argument(
        largest_micro_batch_at + " names micro-batch " + std::to_string(*largest_micro_batch) +
        " but " + std::string(source_name) + " has only " + std::to_string(action_count) +
        " actions; number micro-batches from 0 without gaps");
  }
  schedule.num_micro_batches = largest_micro_batch ? *largest_micro_batch + 1 : 0;
  return schedule;
}

bool IsScheduleFile(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".csv") == 0;
}

Schedule LoadSchedule(const std::string& name_or_path, size_t stages, size_t micro_batches,
                      size_t virtual_stages) {
  try {
    if (!IsScheduleFile(name_or_path))
      return BuildSchedule(name_or_path, stages, micro_batches, virtual_stages);
    std::ifstream in(name_or_path, std::ios::binary);
    TORCH_CHECK(in, "cannot read the schedule file ", name_or_path,
                "; give a CSV path or a schedule name");
    std::ostringstream text;
    text << in.rdbuf();
    return ReadScheduleCsv(text.str(), stages, name_or_path);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
}

}  // namespace gpipe
