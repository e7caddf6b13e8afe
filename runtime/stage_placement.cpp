#include "runtime/stage_placement.h"

#include <algorithm>
#include <map>
#include <string>
#include <thread>

namespace gpipe {

WorkerAssignment AssignWorkers(const std::vector<Stage>& stages, const RankPlan& ranks,
                               int threads_per_stage, int processes_per_machine, bool one_worker,
                               bool share_threads, std::vector<std::unique_ptr<Worker>>& workers) {
  WorkerAssignment assignment;
  if (one_worker) {
    workers.push_back(std::make_unique<Worker>("all-stages", 0));
    for (const auto& stage : stages) {
      if (ranks.IsLocal(stage.index))
        assignment.worker_of_stage.emplace_back(0);
      else
        assignment.worker_of_stage.emplace_back(std::nullopt);
    }
    return assignment;
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads_per_stage == 0) {
    int cpu_stages = 0;
    for (const auto& stage : stages)
      cpu_stages += ranks.IsLocal(stage.index) && stage.device.is_cpu();
    threads_per_stage = std::max(1, cores / std::max(1, cpu_stages * processes_per_machine));
  }
  std::map<std::string, size_t> by_device;
  bool all_cpu = true;
  for (const auto& stage : stages) {
    if (!ranks.IsLocal(stage.index)) {
      assignment.worker_of_stage.emplace_back(std::nullopt);
      continue;
    }
    all_cpu = all_cpu && stage.device.is_cpu();
    std::string key =
        stage.device.is_cpu() ? "cpu/stage" + std::to_string(stage.index) : stage.device.str();
    auto it = by_device.find(key);
    if (it == by_device.end()) {
      it = by_device.emplace(key, workers.size()).first;
      int threads = stage.device.is_cpu() && threads_per_stage > 0 ? threads_per_stage : 0;
      workers.push_back(std::make_unique<Worker>(key, threads));
    }
    assignment.worker_of_stage.push_back(it->second);
  }
  if (share_threads && all_cpu && !ranks.distributed() && threads_per_stage > 0) {
    const size_t fit = static_cast<size_t>(std::max(1, cores / threads_per_stage));
    if (fit < workers.size()) assignment.shared_threads = fit;
  }
  return assignment;
}

}  // namespace gpipe
