// libFuzzer target: any bytes as a schedule CSV (gpipe-run --schedule
// plan.csv, gpipe-inspect --schedule plan.csv). The reader must return a
// schedule or throw std::invalid_argument with a one-line message; a schedule
// it returns must validate or be refused the same way, and one that
// validates must print. Never crash, hang, allocate without bound or trip a
// sanitizer. The first byte picks the stage count (1..8); the rest is the file.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/schedule_csv.h"
#include "runtime/schedule_ir.h"
#include "runtime/schedule_validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t stages = data[0] % 8 + 1;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const gpipe::Schedule schedule = gpipe::ReadScheduleCsv(text, stages, "fuzz.csv");
    gpipe::ValidateSchedule(schedule);
    const std::string table = gpipe::FormatTable(schedule);
    if (table.empty()) __builtin_trap();
    // What it reads back it writes, and that reads back the same.
    const gpipe::Schedule again =
        gpipe::ReadScheduleCsv(gpipe::WriteScheduleCsv(schedule), stages, "again.csv");
    if (again.actions != schedule.actions) __builtin_trap();
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    if (message.empty() || message.find('\n') != std::string::npos) __builtin_trap();  // one line
  }
  return 0;
}
