#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/checkpoint_mode.h"
#include "runtime/copy_streams.h"
#include "runtime/manifest.h"
#include "runtime/peer_group.h"
#include "runtime/rank_plan.h"
#include "runtime/rng_turnstile.h"
#include "runtime/schedule_ir.h"
#include "runtime/stage.h"
#include "runtime/task_trace.h"
#include "runtime/worker.h"

namespace gpipe {

// What a Pipeline is made of, shared with the autograd nodes of forward
// calls whose backward has not run yet (so a Pipeline may be moved or
// destroyed while an output is still alive).
struct PipelineCore {
  Manifest manifest;
  std::vector<Stage> stages;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::optional<size_t>> worker_of_stage;  // nullopt: another rank's stage
  RankPlan ranks;                       // which process runs which stage
  std::shared_ptr<PeerGroup> peers;     // null in one process
  RngTurnstile turnstile;
  TaskTrace trace;
  std::unique_ptr<CopyStreams> copies;  // device boundaries (set by Pipeline::load)
  std::mutex run_mutex;  // one forward or backward schedule at a time
  int64_t chunks = 1;
  bool detect_anomaly = false;
  CheckpointMode checkpoint = CheckpointMode::ExceptLast;
  // train_step's order of work: a builder's name (BuildSchedule), built per
  // step for its micro-batch count, or a CSV file's path, read once into
  // `planned_schedule` for exactly `chunks` micro-batches.
  std::string schedule = "gpipe";
  size_t virtual_stages = 1;
  std::optional<Schedule> planned_schedule;
};

}  // namespace gpipe
