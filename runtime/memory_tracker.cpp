#include "runtime/memory_tracker.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

namespace gpipe {
namespace {

constexpr size_t kMaxStages = 256;

struct Counter {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> baseline{0};  // live bytes at the last ResetPeaks
  std::atomic<int64_t> kept{0};      // the most one forward task left live, since ResetPeaks
};
std::array<Counter, kMaxStages> counters;
Counter total;  // all stages together: their peaks need not coincide
std::atomic<bool> installed{false};
thread_local int current_stage = -1;

std::vector<Counter*> AllCounters() {
  std::vector<Counter*> all{&total};
  for (auto& c : counters) all.push_back(&c);
  return all;
}

void Raise(Counter& c, int64_t bytes) {
  int64_t now = c.current.fetch_add(bytes) + bytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

void Add(int stage, int64_t bytes) {
  Raise(counters[static_cast<size_t>(stage)], bytes);
  Raise(total, bytes);
}

// The wrapped allocation of each tracked block, keyed by its data pointer:
// raw_allocate()/raw_deallocate() (used by oneDNN) need the DataPtr's context
// to be the data pointer itself and a raw deleter that frees by pointer.
struct Allocation {
  c10::DataPtr inner;
  int stage = 0;
  int64_t bytes = 0;
};
std::mutex table_mutex;
std::unordered_map<void*, Allocation>* table = nullptr;
c10::Allocator* base_allocator = nullptr;

void Release(void* data) {
  Allocation allocation;
  bool tracked = false;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto it = table->find(data);
    if (it != table->end()) {
      allocation = std::move(it->second);
      table->erase(it);
      tracked = true;
    }
  }
  if (!tracked) {  // made by an untracked thread, handed out through raw_allocate()
    base_allocator->raw_deleter()(data);
    return;
  }
  counters[static_cast<size_t>(allocation.stage)].current.fetch_sub(allocation.bytes);
  total.current.fetch_sub(allocation.bytes);
}  // allocation.inner frees the memory through the wrapped allocator

// Wraps the CPU allocator that was installed before it. Both allocate()
// spellings are declared so that the class overrides the pure virtual of
// LibTorch 1.13 (const) and of later 2.x releases (non-const).
class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const { return Allocate(n); }
  c10::DataPtr allocate(size_t n) { return Allocate(n); }
  c10::DeleterFnPtr raw_deleter() const override { return &Release; }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

 private:
  c10::DataPtr Allocate(size_t n) const {
    c10::DataPtr inner = base_allocator->allocate(n);
    int stage = current_stage;
    void* data = inner.get();
    if (stage < 0 || n == 0 || data == nullptr) return inner;
    c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(table_mutex);
      (*table)[data] = Allocation{std::move(inner), stage, static_cast<int64_t>(n)};
    }
    Add(stage, static_cast<int64_t>(n));
    return c10::DataPtr(data, data, &Release, device);
  }
};

}  // namespace

void MemoryTracker::Enable() {
  static std::once_flag once;
  std::call_once(once, [] {
    base_allocator = c10::GetCPUAllocator();
    TORCH_CHECK(base_allocator->raw_deleter() != nullptr,
                "--report-memory: the CPU allocator has no raw deleter, cannot wrap it");
    table = new std::unordered_map<void*, Allocation>();  // lives as long as the tensors
    static CountingAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    installed = true;
  });
}

bool MemoryTracker::enabled() { return installed; }

MemoryTracker::StageScope::StageScope(size_t stage) : previous_(current_stage) {
  TORCH_CHECK(stage < kMaxStages, "memory tracking supports up to ", kMaxStages, " stages");
  if (installed) current_stage = static_cast<int>(stage);
}

MemoryTracker::StageScope::~StageScope() { current_stage = previous_; }

void MemoryTracker::ResetPeaks() {
  for (Counter* c : AllCounters()) {
    c->baseline = c->current.load();
    c->peak = c->baseline.load();
    c->kept = 0;
  }
}

MemoryTracker::ForwardScope::ForwardScope(size_t stage)
    : stage_(stage), before_(installed ? counters.at(stage).current.load() : 0) {}

MemoryTracker::ForwardScope::~ForwardScope() {
  if (!installed) return;
  Counter& c = counters.at(stage_);
  const int64_t left = c.current.load() - before_;
  int64_t kept = c.kept.load();
  while (left > kept && !c.kept.compare_exchange_weak(kept, left)) {
  }
}

std::vector<int64_t> MemoryTracker::KeptPerMicroBatch(size_t num_stages) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < num_stages && s < kMaxStages; ++s) out.push_back(counters[s].kept.load());
  return out;
}

int64_t MemoryTracker::TotalPeakBytes() { return total.peak - total.baseline; }

std::vector<int64_t> MemoryTracker::PeakBytes(size_t num_stages) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < num_stages && s < kMaxStages; ++s) out.push_back(counters[s].peak - counters[s].baseline);
  return out;
}

std::vector<int64_t> MemoryTracker::CurrentBytes(size_t num_stages) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < num_stages && s < kMaxStages; ++s) out.push_back(counters[s].current.load());
  return out;
}

std::string MiB(int64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buffer;
}

}  // namespace gpipe
