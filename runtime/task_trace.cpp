#include "runtime/task_trace.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

namespace gpipe {

void TaskTrace::Record(const TaskRecord& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.push_back(record);
}

std::vector<TaskRecord> TaskTrace::Take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TaskRecord> out;
  out.swap(records_);
  return out;
}

int64_t TaskTrace::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* ToString(TaskRecord::Phase phase) {
  switch (phase) {
    case TaskRecord::Phase::Forward: return "forward";
    case TaskRecord::Phase::Backward: return "backward";
    case TaskRecord::Phase::Recompute: return "recompute";
    case TaskRecord::Phase::BackwardInput:
      return "backward-input";
    case TaskRecord::Phase::BackwardWeight:
      return "backward-weight";
    case TaskRecord::Phase::Send:
      return "send";
    case TaskRecord::Phase::Receive:
      return "receive";
  }
  return "?";
}

std::string ChromeTraceJson(const std::vector<TaskRecord>& records,
                            const std::vector<std::string>& worker_names) {
  int64_t origin = INT64_MAX;
  for (const auto& r : records) origin = std::min(origin, r.start_ns);
  nlohmann::json events = nlohmann::json::array();
  for (size_t w = 0; w < worker_names.size(); ++w) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", w},
                      {"args", {{"name", worker_names[w]}}}});
  }
  for (const auto& r : records) {
    // "F2.5": the phase's initial, stage, micro-batch; "SEND1.0"/"RECV2.0" for communication.
    const std::string phase =
        r.phase == TaskRecord::Phase::Send ? "SEND"
        : r.phase == TaskRecord::Phase::Receive
            ? "RECV"
            : std::string(1, static_cast<char>(std::toupper(ToString(r.phase)[0])));
    std::string name = phase + std::to_string(r.stage) + "." + std::to_string(r.micro_batch);
    events.push_back({{"name", name},
                      {"cat", ToString(r.phase)},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", r.worker},
                      {"ts", static_cast<double>(r.start_ns - origin) / 1e3},
                      {"dur", static_cast<double>(r.end_ns - r.start_ns) / 1e3},
                      {"args", {{"stage", r.stage}, {"micro_batch", r.micro_batch}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace gpipe
