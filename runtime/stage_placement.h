#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "runtime/rank_plan.h"
#include "runtime/stage.h"
#include "runtime/worker.h"

namespace gpipe {

struct WorkerAssignment {
  std::vector<std::optional<size_t>> worker_of_stage;  // nullopt: another rank's stage
  // How many of the workers' threads run every worker's actions (Execute's
  // shared_threads), when fewer than the workers; nullopt: one thread each.
  std::optional<size_t> shared_threads;
};

// CPU "devices" are cores: every CPU stage gets its own worker so stages run
// concurrently. Stages on one GPU share that device's worker. The cores are
// shared by the CPU stages of every process on this machine. Appends the
// workers it makes to `workers`. `one_worker`: every local stage on one.
//
// `share_threads`: in one process whose workers all run CPU stages, when the
// workers' intra-op threads outnumber the cores (4 stages x 1 thread on 2
// cores), only cores / threads_per_stage of the worker threads run, taking
// any stage's next ready task. Several processes never share: a task may
// block on a receive.
WorkerAssignment AssignWorkers(const std::vector<Stage>& stages, const RankPlan& ranks,
                               int threads_per_stage, int processes_per_machine, bool one_worker,
                               bool share_threads, std::vector<std::unique_ptr<Worker>>& workers);

}  // namespace gpipe
