// Pipeline::train_step: the forward, the loss (once for the mini-batch, or
// once per micro-batch with its rows, inside the schedule) and the pipelined
// backward of one step, with the loss summed over the ranks in several processes.

#include <torch/csrc/autograd/grad_mode.h>

#include "runtime/model_interface.h"
#include "runtime/peer_group.h"
#include "runtime/pipeline.h"
#include "runtime/pipeline_backward.h"
#include "runtime/pipeline_core.h"
#include "runtime/pipeline_run.h"
#include "runtime/schedule_ir.h"

namespace gpipe {

namespace {

// Which rows of the mini-batch each micro-batch holds, from Scatter's sizes.
std::vector<MicroBatchRows> RowsOf(const std::vector<int64_t>& sizes) {
  int64_t batch = 0;
  for (int64_t size : sizes) batch += size;
  std::vector<MicroBatchRows> rows;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); offset += sizes[i], ++i)
    rows.push_back({i, offset, sizes[i], batch});
  return rows;
}

}  // namespace

double Pipeline::train_step(const std::vector<c10::IValue>& inputs, const LossFunction& loss) {
  TORCH_CHECK(
      core_->schedule == "gpipe", "schedule '", core_->schedule,
      "' runs each micro-batch's backward before the others' forward, so it needs the loss per "
      "micro-batch: call train_step with a MicroBatchLossFunction (see LossShares), or use gpipe");
  return TrainStep(inputs, [&](const std::vector<at::Tensor>& outputs,
                               const std::vector<int64_t>&) { return loss(outputs); });
}

double Pipeline::train_step(const std::vector<c10::IValue>& inputs,
                            const MicroBatchLossFunction& loss) {
  // The whole schedule, each micro-batch's loss inside it (on the rank of the
  // last stage, in several processes).
  at::AutoGradMode grad_mode(true);
  std::vector<c10::IValue> bound = BindArguments(core_->manifest.arguments, inputs);
  auto run = StartRun(bound, true);
  const std::vector<int64_t>& sizes = run->micro_batches().sizes;
  const std::vector<MicroBatchRows> rows = RowsOf(sizes);
  const std::optional<Schedule>& planned = core_->planned_schedule;
  // set_chunks may have changed the count load checked.
  if (auto misfit = ScheduleMisfit(static_cast<int64_t>(sizes.size()))) TORCH_CHECK(false, *misfit);
  const Schedule& schedule = planned ? *planned : core_->ScheduleFor(core_->schedule, sizes.size());
  double total = 0.0;
  try {
    total = run->TrainStep(schedule, [&](size_t i, const std::vector<at::Tensor>& outputs) {
      return loss(rows[i], outputs);
    });
  } catch (const std::exception&) {
    if (auto mismatch = DescribeMismatch(core_->manifest.arguments, bound))
      TORCH_CHECK(false, *mismatch);
    throw;
  }
  CommitDeferredBatchNorm();
  if (core_->peers) {
    at::Tensor sum = at::full({1}, total, at::kDouble);
    core_->peers->AllReduceSum(sum, "the loss of this step");
    total = sum.item<double>();
  }
  return total;
}

double Pipeline::TrainStep(const std::vector<c10::IValue>& args, const BatchLoss& loss) {
  at::AutoGradMode grad_mode(true);
  // Every rank runs its part of both schedules; needs_grad must agree across
  // ranks, so it does not depend on which parameters this rank holds.
  std::vector<c10::IValue> inputs = BindArguments(core_->manifest.arguments, args);
  std::vector<at::Tensor> outputs;
  auto run = RunForward(inputs, true, outputs);
  at::Tensor total = at::zeros({1}, at::kDouble);
  if (core_->ranks.HoldsOutputs()) {
    AttachBackward(run, inputs, outputs);
    at::Tensor value = loss(outputs, run->micro_batches().sizes);
    total.fill_(value.item<double>());
    value.backward();
  } else {
    run->Backward({});
  }
  if (core_->peers) core_->peers->AllReduceSum(total, "the loss of this step");
  return total.item<double>();
}

}  // namespace gpipe
