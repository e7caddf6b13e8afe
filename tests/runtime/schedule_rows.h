#pragma once

// What the schedule tests share: schedules as readable rows, and the
// std::invalid_argument a builder or the validator throws.

#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/schedule_ir.h"

namespace gpipe {

// Readable GoogleTest failures ("1F0" instead of bytes).
inline void PrintTo(const Action& action, std::ostream* out) { *out << ToString(action); }

namespace testing {

using Rows = std::vector<std::string>;

// Each worker's actions as one space-separated line, e.g. "0F0 0F1 0B0 0B1".
inline Rows RowsOf(const Schedule& schedule) {
  Rows rows;
  for (const std::vector<Action>& list : schedule.actions) {
    std::string row;
    for (const Action& action : list) row += (row.empty() ? "" : " ") + ToString(action);
    rows.push_back(row);
  }
  return rows;
}

// What `fn` throws as std::invalid_argument, or "" if it returns.
template <typename Fn>
std::string InvalidArgumentOf(Fn fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace testing
}  // namespace gpipe
