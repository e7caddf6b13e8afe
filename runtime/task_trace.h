#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace gpipe {

// When tracing is on, every (stage, micro-batch) task records when it ran on
// which worker: the balancer profiles stages from it and `gpipe-run --trace`
// writes it as a Chrome/Perfetto timeline. Off, it costs one atomic load per
// task.
struct TaskRecord {
  // Send and Receive: a SEND/RECV action (several processes), the wait included.
  enum class Phase { Forward, Backward, Recompute, BackwardInput, BackwardWeight, Send, Receive };
  size_t stage = 0;
  size_t micro_batch = 0;
  Phase phase = Phase::Forward;
  size_t worker = 0;
  int64_t start_ns = 0;  // steady clock
  int64_t end_ns = 0;
};

class TaskTrace {
 public:
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  void Record(const TaskRecord& record);
  std::vector<TaskRecord> Take();  // returns and clears what was recorded

  static int64_t NowNs();

 private:
  std::atomic<bool> enabled_{false};
  std::mutex mutex_;
  std::vector<TaskRecord> records_;
};

const char* ToString(TaskRecord::Phase phase);

// Chrome trace-event JSON ("X" events, microseconds, one thread per worker),
// readable by chrome://tracing and ui.perfetto.dev.
std::string ChromeTraceJson(const std::vector<TaskRecord>& records,
                            const std::vector<std::string>& worker_names);

}  // namespace gpipe
