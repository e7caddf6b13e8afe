#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <optional>
#include <vector>

#include "runtime/checkpoint_mode.h"
#include "runtime/copy_streams.h"
#include "runtime/manifest.h"
#include "runtime/peer_group.h"
#include "runtime/rank_plan.h"
#include "runtime/executor.h"
#include "runtime/schedule_ir.h"
#include "runtime/stage.h"
#include "runtime/task_trace.h"
#include "runtime/value_transfer.h"
#include "runtime/worker.h"

namespace gpipe {

class ArtifactReader;

// What a Pipeline is made of, shared with the autograd nodes of forward
// calls whose backward has not run yet (so a Pipeline may be moved or
// destroyed while an output is still alive).
struct PipelineCore {
  Manifest manifest;
  std::vector<Stage> stages;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::optional<size_t>> worker_of_stage;  // nullopt: another rank's stage
  std::optional<size_t> shared_threads;  // Execute's: fewer threads than workers run them all
  RankPlan ranks;                       // which process runs which stage
  std::shared_ptr<PeerGroup> peers;     // null in one process
  // The artifact this pipeline was loaded from, when it keeps the source
  // model (model_export.h) that save() carries on; read on the saving thread.
  std::shared_ptr<const ArtifactReader> source_artifact;
  MessageMemory messages;               // what each message id carried last (value_transfer.h)
  TaskTrace trace;
  std::unique_ptr<CopyStreams> copies;  // device boundaries (set by Pipeline::load)
  std::mutex run_mutex;  // one forward or backward schedule at a time
  int64_t chunks = 1;
  bool detect_anomaly = false;
  bool batch_weight_gradients = true;  // PipelineOptions::batch_weight_gradients
  CheckpointMode checkpoint = CheckpointMode::ExceptLast;
  // train_step's order of work: a builder's name (BuildSchedule), built per
  // step for its micro-batch count, or a CSV file's path, read once into
  // `planned_schedule` for exactly `chunks` micro-batches.
  std::string schedule = "gpipe";
  size_t virtual_stages = 1;
  std::optional<Schedule> planned_schedule;
  // The stages' data flow (set by Pipeline::load); its loss_stage is the
  // last stage producing a model output, where train_step runs the loss.
  StageFlow flow;
  // The step that keys the next run's random draws (keyed_random.h).
  uint64_t next_draw_step = 0;

  // Which of a schedule's actions a call runs: forward() runs the forwards,
  // then its backward the backwards; train_step all of them.
  enum class ActionSubset { kAll, kForwards, kBackwards };
  // A builder's schedule for `micro_batches`, built and validated once and
  // kept (BuildSchedule's and ValidateSchedule's std::invalid_argument).
  const Schedule& ScheduleFor(const std::string& name, size_t micro_batches);
  // What this process runs of `schedule`, ordered, with its waits: built
  // once per (schedule, subset, loss in the schedule) and kept, so that a
  // step rebuilds and validates nothing. `loss_in_schedule`: train_step's
  // loss per micro-batch, which backwards wait for.
  const ExecutionPlan& PlanFor(const Schedule& schedule, ActionSubset subset, bool loss_in_schedule);

 private:
  // Both caches are filled on the caller's thread and read-only afterwards;
  // the mutex guards their maps (a forward's backward may run on autograd's thread).
  std::mutex cache_mutex;
  std::map<std::tuple<std::string, size_t>, Schedule> schedules;
  std::map<std::tuple<std::string, size_t, size_t, size_t, int, bool>, ExecutionPlan> plans;
};

}  // namespace gpipe
