#include "runtime/stage_placement.h"

#include <algorithm>
#include <map>
#include <string>
#include <thread>

namespace gpipe {

std::vector<std::optional<size_t>> AssignWorkers(const std::vector<Stage>& stages,
                                                 const RankPlan& ranks, int threads_per_stage,
                                                 int processes_per_machine, bool one_worker,
                                                 std::vector<std::unique_ptr<Worker>>& workers) {
  if (one_worker) {
    workers.push_back(std::make_unique<Worker>("all-stages", 0));
    std::vector<std::optional<size_t>> worker_of_stage;
    for (const auto& stage : stages) {
      if (ranks.IsLocal(stage.index))
        worker_of_stage.emplace_back(0);
      else
        worker_of_stage.emplace_back(std::nullopt);
    }
    return worker_of_stage;
  }
  if (threads_per_stage == 0) {
    int cpu_stages = 0;
    for (const auto& stage : stages)
      cpu_stages += ranks.IsLocal(stage.index) && stage.device.is_cpu();
    int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads_per_stage = std::max(1, cores / std::max(1, cpu_stages * processes_per_machine));
  }
  std::map<std::string, size_t> by_device;
  std::vector<std::optional<size_t>> worker_of_stage;
  for (const auto& stage : stages) {
    if (!ranks.IsLocal(stage.index)) {
      worker_of_stage.emplace_back(std::nullopt);
      continue;
    }
    std::string key =
        stage.device.is_cpu() ? "cpu/stage" + std::to_string(stage.index) : stage.device.str();
    auto it = by_device.find(key);
    if (it == by_device.end()) {
      it = by_device.emplace(key, workers.size()).first;
      int threads = stage.device.is_cpu() && threads_per_stage > 0 ? threads_per_stage : 0;
      workers.push_back(std::make_unique<Worker>(key, threads));
    }
    worker_of_stage.push_back(it->second);
  }
  return worker_of_stage;
}

}  // namespace gpipe
