#include "runtime/rank_plan.h"

#include <algorithm>
#include <set>

#include <c10/util/Exception.h>

namespace gpipe {

RankPlan::RankPlan(const Manifest& manifest, int rank, int world_size, std::vector<int> rank_of_stage)
    : rank_(rank), world_size_(world_size), num_stages_(static_cast<int64_t>(manifest.stages.size())) {
  const size_t num_stages = manifest.stages.size();
  if (rank_of_stage.empty() && !manifest.stages.empty() && manifest.stages[0].rank >= 0) {
    for (const auto& s : manifest.stages) rank_of_stage.push_back(static_cast<int>(s.rank));
  }
  if (rank_of_stage.empty()) {
    TORCH_CHECK(static_cast<size_t>(world_size) == num_stages, "WORLD_SIZE is ", world_size,
                " but the artifact has ", num_stages, " stages and assigns no ranks; start ", num_stages,
                " processes (one stage each), or say which rank runs each stage with --ranks, e.g. --ranks ",
                num_stages >= 2 ? "0,0,1,..." : "0");
    for (size_t s = 0; s < num_stages; ++s) rank_of_stage.push_back(static_cast<int>(s));
  }
  TORCH_CHECK(rank_of_stage.size() == num_stages, "--ranks lists ", rank_of_stage.size(),
              " ranks but the artifact has ", num_stages, " stages; give one rank per stage");
  std::set<int> used;
  for (int r : rank_of_stage) {
    TORCH_CHECK(r >= 0 && r < world_size, "stage rank ", r, " does not exist: WORLD_SIZE is ", world_size,
                "; ranks are 0..", world_size - 1);
    used.insert(r);
  }
  TORCH_CHECK(static_cast<int>(used.size()) == world_size, "WORLD_SIZE is ", world_size, " but only ",
              used.size(), " ranks run a stage; every rank needs at least one stage (--ranks), or start fewer processes");
  rank_of_stage_ = std::move(rank_of_stage);
  output_rank_ = rank_of_stage_.empty() ? 0 : rank_of_stage_.back();

  width_ = std::max<int64_t>(1, static_cast<int64_t>(manifest.outputs.size()));
  for (const auto& s : manifest.stages) width_ = std::max<int64_t>(width_, static_cast<int64_t>(s.inputs.size()));
  remote_uses_.assign(num_stages, {});
  auto add_use = [&](const ValueSource& source, int64_t consumer, int64_t input, int consumer_rank) {
    if (source.origin != ValueSource::Origin::StageOutput) return;
    if (rank_of_stage_[source.stage] == consumer_rank) return;
    remote_uses_[source.stage].push_back({source.index, consumer, input, consumer_rank});
  };
  for (size_t s = 0; s < num_stages; ++s) {
    const auto& inputs = manifest.stages[s].inputs;
    for (size_t n = 0; n < inputs.size(); ++n) {
      add_use(inputs[n], static_cast<int64_t>(s), static_cast<int64_t>(n), rank_of_stage_[s]);
    }
  }
  for (size_t k = 0; k < manifest.outputs.size(); ++k) {
    add_use(manifest.outputs[k], kModelOutputs, static_cast<int64_t>(k), output_rank_);
  }
}

const std::vector<RemoteUse>& RankPlan::remote_uses(size_t stage) const {
  static const std::vector<RemoteUse> kNone;
  return stage < remote_uses_.size() ? remote_uses_[stage] : kNone;
}

int RankPlan::Message(bool backward, size_t micro_batch, size_t num_micro_batches, int64_t consumer,
                      int64_t input) const {
  const int64_t consumers = num_stages_ + 1;  // the stages, then the model outputs
  const int64_t slot = consumer == kModelOutputs ? num_stages_ : consumer;
  const int64_t m = static_cast<int64_t>(num_micro_batches);
  const int64_t id = ((static_cast<int64_t>(backward) * m + static_cast<int64_t>(micro_batch)) * consumers + slot) * width_ + input;
  // SendValue uses tags 2*id and 2*id+1, which c10d takes as an int.
  TORCH_CHECK(2 * m * consumers * width_ < kMaxMessages, num_micro_batches,
              " micro-batches x ", num_stages_, " stages need more c10d tags than exist; use fewer chunks");
  return static_cast<int>(id);
}

int RankPlan::SaveMessage(size_t stage) const {
  return static_cast<int>(kMaxMessages + static_cast<int64_t>(stage));
}

std::vector<int> ParseRanks(const std::vector<std::string>& items) {
  std::vector<int> ranks;
  for (const auto& item : items) {
    size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TORCH_CHECK(used == item.size() && !item.empty() && value >= 0, "--ranks entry '", item,
                "' is not a rank; give one non-negative integer per stage, e.g. --ranks 0,0,1");
    ranks.push_back(value);
  }
  return ranks;
}

StageFlow StageFlowOf(const Manifest& manifest) {
  const size_t num_stages = manifest.stages.size();
  StageFlow flow;
  flow.num_stages = num_stages;
  flow.reads_from.resize(num_stages);
  flow.read_by.resize(num_stages);
  flow.feeds_loss.assign(num_stages, false);
  for (size_t j = 0; j < num_stages; ++j) {
    for (const ValueSource& source : manifest.stages[j].inputs) {
      if (source.origin != ValueSource::Origin::StageOutput) continue;
      const size_t p = static_cast<size_t>(source.stage);
      auto& from = flow.reads_from[j];
      if (std::find(from.begin(), from.end(), p) != from.end()) continue;
      from.push_back(p);
      flow.read_by[p].push_back(j);
    }
  }
  for (const ValueSource& source : manifest.outputs) {
    if (source.origin != ValueSource::Origin::StageOutput) continue;
    const size_t s = static_cast<size_t>(source.stage);
    flow.feeds_loss[s] = true;
    flow.loss_stage = std::max(flow.loss_stage.value_or(0), s);
  }
  return flow;
}

}  // namespace gpipe
