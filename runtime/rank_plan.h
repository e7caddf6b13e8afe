#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/manifest.h"
#include "runtime/schedule_ir.h"

namespace gpipe {

// A use, on another rank, of one output of a stage.
struct RemoteUse {
  int64_t output;    // index in the producing stage's outputs
  int64_t consumer;  // consuming stage, or RankPlan::kModelOutputs
  int64_t input;     // index in the consumer's inputs (or in the model's outputs)
  int rank;          // where the consumer runs
};

// Which rank (process) runs each stage of a multi-process pipeline, and the
// values that cross between ranks. Every rank runs the same clock schedule
// and skips the tasks of other ranks' stages; a value produced on one rank
// and used on another is sent straight from producer to consumer (a skip
// route is one message, never relayed), and its gradient comes back the same
// way. The model's outputs are gathered on the rank of the last stage, where
// the loss is computed. A value used by two stages of one remote rank is sent
// twice (once per consuming stage): simple, and rare outside skip routes.
class RankPlan {
 public:
  static constexpr int64_t kModelOutputs = -1;
  // Message numbers of a step are below kMaxMessages; others (saving) above.
  static constexpr int64_t kMaxMessages = int64_t{1} << 28;

  RankPlan() = default;  // one process: every stage is local
  // `rank_of_stage` empty: the manifest's assignment, else one stage per rank.
  RankPlan(const Manifest& manifest, int rank, int world_size, std::vector<int> rank_of_stage);

  bool distributed() const { return world_size_ > 1; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int rank_of(size_t stage) const { return rank_of_stage_.empty() ? 0 : rank_of_stage_[stage]; }
  bool IsLocal(size_t stage) const { return rank_of(stage) == rank_; }
  int output_rank() const { return output_rank_; }
  bool HoldsOutputs() const { return output_rank_ == rank_; }
  const std::vector<int>& rank_of_stage() const { return rank_of_stage_; }

  // Uses of stage `stage`'s outputs on other ranks (empty in one process).
  const std::vector<RemoteUse>& remote_uses(size_t stage) const;

  // The message number of one value crossing ranks within one step
  // (see SendValue): unique per direction, micro-batch and consuming input.
  int Message(bool backward, size_t micro_batch, size_t num_micro_batches, int64_t consumer,
              int64_t input) const;
  // Messages outside a step's values: a stage's weights when saving.
  int SaveMessage(size_t stage) const;

 private:
  int rank_ = 0;
  int world_size_ = 1;
  int output_rank_ = 0;
  int64_t num_stages_ = 0;
  int64_t width_ = 1;  // max inputs of a stage or model outputs
  std::vector<int> rank_of_stage_;
  std::vector<std::vector<RemoteUse>> remote_uses_;
};

// Which stages read which, and where the loss runs (the last stage producing
// a model output): what a schedule's actions wait for, and where SEND/RECV go.
StageFlow StageFlowOf(const Manifest& manifest);

// "0,0,1" -> {0, 0, 1}; any malformed entry is an error naming --ranks.
std::vector<int> ParseRanks(const std::vector<std::string>& items);

}  // namespace gpipe
