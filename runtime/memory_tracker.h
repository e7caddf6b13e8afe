#pragma once

#include <cstddef>

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

// Per-stage peak of live CPU tensor bytes that the stage's own tasks
// allocated (activations kept for backward, recomputed activations,
// gradients), measured by wrapping LibTorch's CPU allocator. Allocations made
// outside a stage task (parameters, the optimizer, the caller's tensors) are
// not counted. Off unless Enable() is called: then every CPU allocation pays
// one extra heap node and two atomic adds. CUDA memory is not counted
// (the caching allocator keeps its own statistics).
class MemoryTracker {
 public:
  static void Enable();  // installs the counting allocator; idempotent
  static bool enabled();

  // Attributes this thread's allocations to `stage` while alive.
  class StageScope {
   public:
    explicit StageScope(size_t stage);
    ~StageScope();
    StageScope(const StageScope&) = delete;
    StageScope& operator=(const StageScope&) = delete;

   private:
    int previous_;
  };

  // Measures what one forward task of `stage` leaves allocated while alive
  // (live bytes after it minus before): what its micro-batch keeps until
  // backward, outputs included. Exact when no task of the stage frees memory
  // meanwhile, as in GPipe's forward phase; with other schedules a backward
  // of the next stage may free this stage's outputs concurrently.
  class ForwardScope {
   public:
    explicit ForwardScope(size_t stage);
    ~ForwardScope();
    ForwardScope(const ForwardScope&) = delete;
    ForwardScope& operator=(const ForwardScope&) = delete;

   private:
    size_t stage_;
    int64_t before_;
  };

  // Starts a measurement: peaks are reported above what is live now, so that
  // parameter gradients kept from the previous step are not counted.
  static void ResetPeaks();
  static std::vector<int64_t> PeakBytes(size_t num_stages);  // since ResetPeaks, per stage
  static int64_t TotalPeakBytes();  // all stages' live bytes together, at their joint peak
  static std::vector<int64_t> CurrentBytes(size_t num_stages);
  // The most any forward task of each stage left allocated (ForwardScope), since ResetPeaks.
  static std::vector<int64_t> KeptPerMicroBatch(size_t num_stages);
};

// Bytes as "12.5 MiB", one decimal: how the tools and their errors print sizes.
std::string MiB(int64_t bytes);

}  // namespace gpipe
