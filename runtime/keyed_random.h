#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

namespace torch {
class Library;
namespace jit {
struct Graph;
}
}  // namespace torch

namespace gpipe {

// Random numbers by key, not by turn.
//
// gpipe-compile's KeyRandomOps pass (passes/key_random_ops.h) gives every
// random op of the model an identity (its place in the lowered model, before
// any split) and makes it draw from `gpipe::keyed_generator(op)`. While a
// stage task runs, a DrawScope on its thread says which draw this is: the
// run's seed, its step and the micro-batch. The generator an op gets is
// seeded by (seed, step, micro-batch, op, n) — n counts the op's calls within
// the task, so an op inside a loop draws afresh each iteration — and by
// nothing else. So:
//   - stages draw concurrently, on any thread, in one process or many: no
//     turns, no generator state travelling between ranks;
//   - a recompute replays the forward's draws by opening the same scope;
//   - results do not depend on the schedule, the checkpoint mode, thread or
//     process counts, or how the model is split into stages.
// They depend on the micro-batch count (each micro-batch draws its own
// masks) and, like any run, on the seed and the step.
struct DrawKey {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint64_t micro_batch = 0;
};

// Sets this thread's draw key for its lifetime (per-op call counts start at
// zero) and the device whose generator keyed ops get. Scopes nest; the inner
// one wins. Threading: the key is thread-local, so each worker thread's tasks
// have their own and nothing is shared.
class DrawScope {
 public:
  DrawScope(const DrawKey& key, const c10::Device& device);
  ~DrawScope();
  DrawScope(const DrawScope&) = delete;
  DrawScope& operator=(const DrawScope&) = delete;

  struct State;  // the thread's key, device and per-op call counts

 private:
  State* previous_;
};

// The generator keyed op `op` draws from on this thread now: a fresh one
// seeded from the current DrawScope's key, or nullopt outside any scope
// (then the op draws from LibTorch's default generator, as it did before the
// rewrite: a stage module run on its own behaves like the original).
std::optional<at::Generator> KeyedGenerator(int64_t op);

// The seed of a key for (key, op, call): splitmix64 over the five numbers.
uint64_t KeyedSeed(const DrawKey& key, int64_t op, uint64_t call);

// The first random op of `graph` (and its blocks) that does not draw from a
// keyed generator, as "aten::bernoulli", or nullopt. A stage compiled before
// keyed random numbers (its dropout drew from the shared generator in turn)
// has one; the runtime refuses such a stage.
std::optional<std::string> FirstUnkeyedRandomOp(const torch::jit::Graph& graph);

// Registers gpipe::keyed_generator, gpipe::dropout and
// gpipe::scaled_dot_product_attention (called from the
// runtime's TORCH_LIBRARY(gpipe), recompute.cpp, beside the replay ops).
void DefineKeyedRandomOps(torch::Library& m);

// Whether `graph` has a keyed random op (informational: gpipe-inspect's "random").
bool HasKeyedRandomOps(const torch::jit::Graph& graph);

}  // namespace gpipe
