#pragma once

// A pipeline schedule as data: one ordered list of actions per worker, in the
// style of PyTorch's pipelining runtime (`torch/distributed/pipelining`), where
// `2F5` is stage 2's forward of micro-batch 5. Builders are pure functions;
// ValidateSchedule (schedule_validate.h) proves the lists cannot deadlock and
// reports peak in-flight micro-batches; schedule_csv.h dumps and loads them.
// An executor walks a worker's list and never needs to know which schedule
// produced it.
//
// The four built-in schedules for 4 stages and 8 micro-batches, as FormatTable
// prints them for one process (on several, AddCommunication adds SEND/RECV):
// worker rows, time-step columns, every action one time step, "." an idle
// step. (Interleaved 1F1B runs the 4 stages on 2 workers, 2
// virtual stages each.) One step per action is a simplification: a real B
// costs about two F's and I and W about one each. GPipe's and 1F1B's bubble
// fractions, (S-1)/(M+S-1), come out the same either way.
//
// clang-format off
// gpipe: 4 stages, 8 micro-batches, 4 workers
// step     0   1   2   3   4   5   6   7   8   9   10  11  12  13  14  15  16  17  18  19  20  21
// worker 0 0F0 0F1 0F2 0F3 0F4 0F5 0F6 0F7 .   .   .   .   .   .   0B0 0B1 0B2 0B3 0B4 0B5 0B6 0B7
// worker 1 .   1F0 1F1 1F2 1F3 1F4 1F5 1F6 1F7 .   .   .   .   1B0 1B1 1B2 1B3 1B4 1B5 1B6 1B7 .
// worker 2 .   .   2F0 2F1 2F2 2F3 2F4 2F5 2F6 2F7 .   .   2B0 2B1 2B2 2B3 2B4 2B5 2B6 2B7 .   .
// worker 3 .   .   .   3F0 3F1 3F2 3F3 3F4 3F5 3F6 3F7 3B0 3B1 3B2 3B3 3B4 3B5 3B6 3B7 .   .   .
// bubble fraction 0.273; peak in-flight per worker: 8 8 8 8
//
// 1f1b: 4 stages, 8 micro-batches, 4 workers
// step     0   1   2   3   4   5   6   7   8   9   10  11  12  13  14  15  16  17  18  19  20  21
// worker 0 0F0 0F1 0F2 0F3 .   .   .   0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 .   0B5 .   0B6 .   0B7
// worker 1 .   1F0 1F1 1F2 .   .   1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 .   1B6 .   1B7 .
// worker 2 .   .   2F0 2F1 .   2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 .   2B7 .   .
// worker 3 .   .   .   3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7 .   .   .
// bubble fraction 0.273; peak in-flight per worker: 4 3 2 1
//
// interleaved-1f1b: 4 stages, 8 micro-batches, 2 workers
// step     0   1   2   3   4   5   6   7   8   9   10  11  12  13  14  15  16  17  18  19  20  21  22  23  24  25  26  27  28  29  30  31  32  33
// worker 0 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 0F4 2B2 0F5 2B3 2F4 0B2 2F5 0B3 0F6 2B4 0F7 2B5 2F6 0B4 2F7 0B5 .   2B6 .   2B7 0B6 0B7
// worker 1 .   1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1F4 1B2 1F5 1B3 3F4 3B4 3F5 3B5 1F6 1B4 1F7 1B5 3F6 3B6 3F7 3B7 1B6 1B7 .
// bubble fraction 0.059; peak in-flight per worker: 5 3
//
// zb-h1: 4 stages, 8 micro-batches, 4 workers
// step     0   1   2   3   4   5   6   7   8   9   10  11  12  13  14  15  16  17  18  19  20  21  22  23  24  25  26
// worker 0 0F0 0F1 0F2 0F3 .   .   .   0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7
// worker 1 .   1F0 1F1 1F2 .   .   1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1F6 1I4 1W3 1F7 1I5 1W4 1I6 1W5 1I7 1W6 1W7
// worker 2 .   .   2F0 2F1 .   2I0 2F2 2I1 2F3 2I2 2W0 2F4 2I3 2W1 2F5 2I4 2W2 2F6 2I5 2W3 2F7 2I6 2W4 2I7 2W5 2W6 2W7
// worker 3 .   .   .   3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7
// bubble fraction 0.111; peak in-flight per worker: 4 4 4 4
// clang-format on

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace gpipe {

// F, B, I, W. B is a full backward. Zero-bubble schedules split it in two: I
// computes the gradient of the stage's inputs (what the previous stage waits
// for) and W the gradient of its weights (what nobody waits for, so it can be
// moved into a bubble). I + W of one (stage, micro-batch) replace its B.
//
// The last four move values between ranks (processes); AddCommunication
// (schedule_lowering.h) inserts them into a schedule placed on several ranks,
// as PyTorch's `_add_send_recv` does, spelled as PyTorch spells them:
//   sSEND_Fm  stage s's outputs for micro-batch m, to their readers on other ranks
//   sRECV_Fm  stage s's inputs for micro-batch m, from their producers on other ranks
//   sSEND_Bm  the gradients of those inputs, back to the producers
//   sRECV_Bm  the gradients of stage s's outputs, from their readers
// Each covers every value of its (stage, micro-batch) crossing ranks in that
// direction: one action per stage and micro-batch, one message per value.
enum class ActionKind {
  kForward,
  kBackward,
  kBackwardInput,
  kBackwardWeight,
  kSendForward,
  kRecvForward,
  kSendBackward,
  kRecvBackward,
};
inline constexpr size_t kNumActionKinds = 8;

// SEND_F, RECV_F, SEND_B or RECV_B.
bool IsCommunication(ActionKind kind);
// F and the forward direction's SEND_F and RECV_F.
bool IsForwardDirection(ActionKind kind);

struct Action {
  ActionKind kind;
  size_t stage;
  size_t micro_batch;
  bool operator==(const Action& o) const {
    return kind == o.kind && stage == o.stage && micro_batch == o.micro_batch;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

// PyTorch's spelling: stage, kind, micro-batch ("2F5", "1B0", "0I3", "1SEND_F5").
std::string ToString(const Action& action);

// The inverse of ToString; nullopt unless the whole text is one action
// (no spaces, no trailing characters).
std::optional<Action> ParseAction(const std::string& text);

struct Schedule {
  std::string name;
  size_t num_stages = 0;
  size_t num_micro_batches = 0;
  size_t num_workers = 0;
  std::vector<std::vector<Action>> actions;  // per worker, in execution order
  std::vector<size_t> worker_of_stage;       // per stage
  // Per stage, the rank (process) running it, set by AddCommunication along
  // with the SEND/RECV actions; empty: one process, no communication.
  std::vector<int> rank_of_stage;
};

// GPipe: every forward in micro-batch order, then every backward in
// micro-batch order, as PyTorch's ScheduleGPipe runs them (torchgpipe's
// clock cycles run them last first; the bubble is the same). Worker w runs
// stage w. Keeps all M micro-batches' activations alive at once. Its
// backwards sum each stage's weight gradients in the order every other
// schedule does, so all four train to bitwise the same weights.
Schedule BuildGpipe(size_t stages, size_t micro_batches);

// Non-interleaved 1F1B (PipeDream-flush, Megatron-LM): worker w runs
// min(S-1-w, M) warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards. Micro-batches go in
// increasing order for both F and B. Same bubble as GPipe, but worker w holds
// at most min(S-w, M) micro-batches instead of M.
Schedule Build1F1B(size_t stages, size_t micro_batches);

// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM; PyTorch's
// ScheduleInterleaved1F1B): S = workers * virtual_stages stages, stage s on
// worker s % workers, so each worker holds virtual_stages non-adjacent
// stages ("chunks"). Micro-batches go in groups of `workers`: a worker runs a
// group through its first chunk, then its second, and so on (depth first),
// and backwards through the chunks in reverse. Worker w warms up with
// (V-1)*workers + 2*(workers-1-w) forwards (capped at V*M), then alternates
// F and B, then drains. Throws std::invalid_argument unless M is a multiple
// of `workers`, since the groups must be full.
Schedule BuildInterleaved1F1B(size_t workers, size_t virtual_stages, size_t micro_batches);

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B with every
// B split into I then W. Worker w holds back its first w W's and runs the
// rest one per I, so the held-back W's fill the cool-down bubble at the end.
// Holding back w W's lets worker w keep w more micro-batches alive, which
// uses exactly the slack 1F1B leaves it: every worker's peak becomes
// min(S, M), 1F1B's worker-0 peak, so the largest peak over the workers is
// unchanged. Each W comes after its own I on the same worker.
Schedule BuildZeroBubbleH1(size_t stages, size_t micro_batches);

// The most (stage, micro-batch) pairs a builder schedules: a step of more
// is a typo, not a pipeline. Builders throw std::invalid_argument beyond it.
inline constexpr size_t kMaxScheduledPairs = 1000000;

// Dispatches on "gpipe", "1f1b", "interleaved-1f1b" or "zb-h1". `stages` is
// always the total number of stages S. For interleaved-1f1b the workers are
// S / virtual_stages (virtual_stages must divide S); the others need
// virtual_stages == 1. Throws std::invalid_argument with the fix.
Schedule BuildSchedule(const std::string& name, size_t stages, size_t micro_batches,
                       size_t virtual_stages = 1);

// The stages' data flow, for what an action waits for. A plain pipeline is a
// chain; a compiled model may also route skips (stage 3 reads stage 0's
// output) and compute its loss inside the schedule, in the forward of the
// last stage producing an output.
struct StageFlow {
  size_t num_stages = 0;
  std::vector<std::vector<size_t>> reads_from;  // per stage: the stages whose outputs it reads
  std::vector<std::vector<size_t>> read_by;     // per stage: the stages reading its outputs
  std::optional<size_t> loss_stage;  // train_step: its forward also runs the micro-batch's loss
  std::vector<bool> feeds_loss;      // per stage: produces a model output
  static StageFlow Chain(size_t stages);  // stage s reads s - 1; no loss in the schedule
};

// Whether stage s reads an output of a stage on another rank, and whether a
// stage (or the model's outputs, gathered on the last stage's rank) on
// another rank reads one of s's: where SEND/RECV actions go (AddCommunication)
// and what they wait for. Never, with `rank_of_stage` empty (one process).
bool ReadsFromAnotherRank(size_t s, const StageFlow& flow, const std::vector<int>& rank_of_stage);
bool ReadByAnotherRank(size_t s, const StageFlow& flow, const std::vector<int>& rank_of_stage);

// What `action` waits for: the one rule ValidateSchedule simulates and the
// executor runs (over the model's flow and, in several processes, ranks).
//   F(s,m): F(s-1,m) and F of every stage s reads from;
//   B or I (s,m): F(s,m), the B or I of s+1 and of every stage reading s,
//     and F(loss_stage,m) when s feeds the loss;
//   W(s,m): I(s,m).
// A "B or I" of another stage is returned with `input_grad_kind(stage, m)`:
// whichever of the two the schedule runs. Across ranks (`rank_of_stage` set),
// a value read from another rank arrives by a receive instead:
//   F(s,m) waits for RECV_F(s,m) in place of its producers there, which waits
//     for their SEND_F(p,m), which waits for F(p,m);
//   B or I (s,m) waits for RECV_B(s,m) in place of its readers there, which
//     waits for their SEND_B(c,m) (and for F(loss_stage,m), whose loss answers
//     the model outputs it received), which waits for their B or I.
template <typename InputGradKind>
std::vector<Action> ActionDependencies(const Action& action, const StageFlow& flow,
                                       const std::vector<int>& rank_of_stage,
                                       const InputGradKind& input_grad_kind) {
  const size_t s = action.stage;
  const size_t m = action.micro_batch;
  auto remote = [&](size_t other) {
    return !rank_of_stage.empty() && rank_of_stage[other] != rank_of_stage[s];
  };
  auto contains = [](const std::vector<size_t>& list, size_t x) {
    for (size_t y : list) {
      if (y == x) return true;
    }
    return false;
  };
  std::vector<Action> needs;
  auto need_once = [&needs](const Action& a) {
    for (const Action& b : needs) {
      if (b == a) return;
    }
    needs.push_back(a);
  };
  // A producer p of s, or a stage ordered before it (s - 1, read or not).
  auto after_producer = [&](size_t p) {
    if (remote(p) && contains(flow.reads_from[s], p)) {
      need_once({ActionKind::kRecvForward, s, m});
    } else {
      need_once({ActionKind::kForward, p, m});
    }
  };
  // A reader c of s's outputs, or the stage after it.
  auto after_reader = [&](size_t c) {
    if (remote(c) && contains(flow.read_by[s], c)) {
      need_once({ActionKind::kRecvBackward, s, m});
    } else {
      need_once({input_grad_kind(c, m), c, m});
    }
  };
  const bool feeds_remote_loss =
      flow.loss_stage && flow.feeds_loss[s] && *flow.loss_stage != s && remote(*flow.loss_stage);
  switch (action.kind) {
    case ActionKind::kForward:
      if (s > 0) after_producer(s - 1);
      for (size_t p : flow.reads_from[s]) after_producer(p);
      break;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      needs.push_back({ActionKind::kForward, s, m});
      if (s + 1 < flow.num_stages) after_reader(s + 1);
      for (size_t c : flow.read_by[s]) after_reader(c);
      if (ReadByAnotherRank(s, flow, rank_of_stage)) need_once({ActionKind::kRecvBackward, s, m});
      if (flow.loss_stage && flow.feeds_loss[s] && *flow.loss_stage != s && !feeds_remote_loss)
        need_once({ActionKind::kForward, *flow.loss_stage, m});
      break;
    case ActionKind::kBackwardWeight:
      needs.push_back({ActionKind::kBackwardInput, s, m});
      break;
    case ActionKind::kSendForward:
      needs.push_back({ActionKind::kForward, s, m});
      break;
    case ActionKind::kRecvForward:
      for (size_t p : flow.reads_from[s]) {
        if (remote(p)) need_once({ActionKind::kSendForward, p, m});
      }
      break;
    case ActionKind::kSendBackward:
      needs.push_back({input_grad_kind(s, m), s, m});
      break;
    case ActionKind::kRecvBackward:
      for (size_t c : flow.read_by[s]) {
        if (remote(c)) need_once({ActionKind::kSendBackward, c, m});
      }
      if (feeds_remote_loss) need_once({ActionKind::kForward, *flow.loss_stage, m});
      break;
  }
  return needs;
}

// Worker rows x time-step columns as ValidateSchedule simulates them (every
// action one time step, an action starts once its dependencies finished in an
// earlier step), "." for an idle step, then a line with the bubble fraction
// and each worker's peak in-flight micro-batches. Throws what
// ValidateSchedule throws. `flow`: the stages' data flow (a chain when not given).
std::string FormatTable(const Schedule& schedule, const StageFlow* flow = nullptr);

}  // namespace gpipe
