#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "runtime/schedule_ir.h"

namespace gpipe {

// A schedule as CSV, the format PyTorch's pipelining runtime dumps and loads
// (`_dump_csv` / `_load_csv`): one row per worker, one action per cell,
// e.g.
//
//   0F0,0F1,0B1,0B0
//   1F0,1F1,1B1,1B0
//
// Hand-written plans let a user try a schedule without writing a builder.

// One line per worker, "\n"-terminated.
std::string WriteScheduleCsv(const Schedule& schedule);

// Parses `text`: workers = rows (trailing blank rows, empty or only empty
// cells, ignored; a blank row before others is an idle worker), micro-batches
// = one past the largest micro-batch named, worker_of_stage = the row holding
// each stage. Empty cells are skipped, since PyTorch writes an idle step as
// one; spaces around a cell and "\r\n" line ends are accepted. Throws
// std::invalid_argument with a one-line message naming source:row:column
// (both from 1; column counts cells) for a cell that is not an action, names
// a stage >= num_stages, puts a stage on a second row, or names a
// micro-batch beyond the number of actions (a typo that would otherwise size
// the validator's tables), and for a stage no row mentions. The result is not
// validated: call ValidateSchedule.
Schedule ReadScheduleCsv(const std::string& text, size_t num_stages, std::string_view source_name);

// A path ending in ".csv" names a schedule file rather than a builder.
bool IsScheduleFile(const std::string& name);

// `name_or_path`: a builder's name (BuildSchedule), or a CSV file read with
// ReadScheduleCsv (it plans its own micro-batch count; `micro_batches` and
// `virtual_stages` are then unused). Not validated. Errors are one-line
// c10::Errors, as the CLIs and Pipeline::load print them.
Schedule LoadSchedule(const std::string& name_or_path, size_t stages, size_t micro_batches,
                      size_t virtual_stages);

}  // namespace gpipe
