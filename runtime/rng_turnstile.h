#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace gpipe {

// LibTorch has one process-wide CPU generator (and TorchScript 1.13 cannot pass
// a Generator to a saved module), so stages that draw random numbers take
// turns: each such task holds a ticket handed out in schedule order and runs
// only when its number is served. Draws therefore happen in the same order in
// every run and every checkpoint mode, and a task's draws are contiguous, so
// recomputation can replay them from a saved state. Stages without random ops
// never touch the turnstile.
class RngTurnstile {
 public:
  uint64_t TakeTicket() { return next_ticket_++; }  // called by the scheduler thread only
  void Reset() { next_ticket_ = 0; serving_ = 0; }

  // Holds the turn for one ticket; the turn passes on when destroyed.
  class Turn {
   public:
    Turn(RngTurnstile& turnstile, uint64_t ticket);
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    RngTurnstile& turnstile_;
  };

 private:
  std::mutex mutex_;
  std::condition_variable turn_;
  uint64_t next_ticket_ = 0;
  uint64_t serving_ = 0;
};

// The state of every default generator a stage may draw from (CPU, and the
// CUDA device's when built with CUDA).
struct RngState {
  at::Tensor cpu;
#ifdef GPIPE_WITH_CUDA
  at::Tensor cuda;
  int cuda_device = -1;
#endif
};

RngState CaptureRngState(const c10::Device& device);
void RestoreRngState(const RngState& state);

}  // namespace gpipe
