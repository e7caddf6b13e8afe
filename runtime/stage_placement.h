#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "runtime/rank_plan.h"
#include "runtime/stage.h"
#include "runtime/worker.h"

namespace gpipe {

// CPU "devices" are cores: every CPU stage gets its own worker so stages run
// concurrently. Stages on one GPU share that device's worker. The cores are
// shared by the CPU stages of every process on this machine.
// Returns each stage's worker (nullopt: another rank's stage) and appends the
// workers it makes to `workers`. `one_worker`: every local stage on one.
std::vector<std::optional<size_t>> AssignWorkers(const std::vector<Stage>& stages,
                                                 const RankPlan& ranks, int threads_per_stage,
                                                 int processes_per_machine, bool one_worker,
                                                 std::vector<std::unique_ptr<Worker>>& workers);

}  // namespace gpipe
