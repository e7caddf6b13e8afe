#pragma once

#include <vector>

#include "runtime/schedule_ir.h"

namespace gpipe {

// Lowers a compute schedule placed on several ranks into one that also says
// when values cross between them (PyTorch's `_add_send_recv`): a RECV right
// before the action that reads what it receives, a SEND right after the
// action that makes what it sends, on the worker of the stage concerned.
//
//   ranks 0,1 (stage 0 on rank 0, stage 1 on rank 1), gpipe, 2 micro-batches:
//   before   worker 0: 0F0 0F1 0B0 0B1
//            worker 1: 1F0 1F1 1B0 1B1
//   after    worker 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
//            worker 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1
//
// A stage gets RECV_F/SEND_B where it reads another rank's output
// (ReadsFromAnotherRank) and SEND_F/RECV_B where another rank reads its
// outputs (ReadByAnotherRank, the model's outputs included). The result
// carries `rank_of_stage`, so ValidateSchedule(result, flow) checks the
// SEND/RECV actions and simulates them for deadlock. Every rank lowers the
// same schedule the same way and runs its own stages' actions.
//
// `compute` must hold no SEND/RECV yet (std::invalid_argument otherwise:
// a schedule file gives compute actions only). `rank_of_stage` empty or all
// one rank: returns `compute` unchanged but for the ranks.
Schedule AddCommunication(const Schedule& compute, const StageFlow& flow,
                          const std::vector<int>& rank_of_stage);

}  // namespace gpipe
