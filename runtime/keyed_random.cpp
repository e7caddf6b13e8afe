// Keyed random numbers (keyed_random.h) and the two ops that stage graphs
// call for them:
//   gpipe::keyed_generator(int op) -> Generator?
//       the generator of op `op` for this thread's current draw
//   gpipe::dropout(Tensor input, float p, bool train, bool feature, bool alpha,
//                  Generator? generator) -> Tensor
//       aten::dropout / feature_dropout / alpha_dropout / feature_alpha_dropout
//       with a generator (ATen's have none); the same arithmetic as ATen's
//       CPU kernel (Dropout.cpp's _dropout_impl), so with the default
//       generator it draws and computes what aten::dropout does.
//   gpipe::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value,
//       Tensor? attn_mask, float dropout_p, bool is_causal, float? scale,
//       bool enable_gqa, Generator? generator) -> Tensor
//       ATen's attention, whose dropout has no generator: ATen's op itself
//       when dropout_p is 0 (eval) or there is no draw scope, else ATen's
//       math path (attention.cpp) with the mask drawn by gpipe::dropout.
// All three are composite (made of differentiable ATen ops), so autograd needs
// nothing of its own.

#include "runtime/keyed_random.h"

#include <cmath>
#include <limits>

#include <unordered_map>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>

#include "runtime/torch_compat.h"
#ifdef GPIPE_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace gpipe {

struct DrawScope::State {
  DrawKey key;
  c10::Device device;
  std::unordered_map<int64_t, uint64_t> calls;  // op -> calls so far in this scope
};

namespace {
thread_local DrawScope::State* current = nullptr;

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

DrawScope::DrawScope(const DrawKey& key, const c10::Device& device) : previous_(current) {
  current = new State{key, device, {}};
}

DrawScope::~DrawScope() {
  delete current;
  current = previous_;
}

uint64_t KeyedSeed(const DrawKey& key, int64_t op, uint64_t call) {
  uint64_t h = SplitMix(key.seed);
  for (uint64_t part : {key.step, key.micro_batch, static_cast<uint64_t>(op), call})
    h = SplitMix(h ^ part);
  return h;
}

std::optional<at::Generator> KeyedGenerator(int64_t op) {
  if (current == nullptr) return std::nullopt;
  const uint64_t seed = KeyedSeed(current->key, op, current->calls[op]++);
#ifdef GPIPE_WITH_CUDA
  if (current->device.is_cuda()) {
    // Philox: the seed is the key, the offset starts at 0 for each generator.
    at::Generator generator = at::cuda::detail::createCUDAGenerator(current->device.index());
    generator.set_current_seed(seed);
    return generator;
  }
#endif
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

namespace {

bool IsKeyedGenerator(const torch::jit::Value* v) {
  static const auto kKeyed = c10::Symbol::fromQualString("gpipe::keyed_generator");
  return v->node()->kind() == kKeyed;
}

// Where `node` draws from: the index of its "generator" input, if it has one.
std::optional<size_t> GeneratorInput(const torch::jit::Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (schema == nullptr) return std::nullopt;
  for (size_t k = 0; k < schema->arguments().size() && k < node->inputs().size(); ++k) {
    if (schema->arguments()[k].name() == "generator") return k;
  }
  return std::nullopt;
}

// Calls `visit(node, keyed)` for every random op: keyed = it draws from a keyed generator.
template <typename Visit>
bool ForEachRandomOp(const torch::jit::Block* block, const Visit& visit) {
  static const auto kDropout = c10::Symbol::fromQualString("gpipe::dropout");
  for (const torch::jit::Node* node : block->nodes()) {
    for (const torch::jit::Block* sub : node->blocks()) {
      if (ForEachRandomOp(sub, visit)) return true;
    }
    if (node->kind() == kDropout) {
      if (visit(node, IsKeyedGenerator(node->inputs().at(5)))) return true;
      continue;
    }
    std::optional<size_t> generator = GeneratorInput(node);
    if (generator) {
      const torch::jit::Value* g = node->inputs()[*generator];
      const bool none = g->type()->kind() == c10::TypeKind::NoneType ||
                        (g->node()->kind() == c10::prim::Constant && g->node()->output()->type()->kind() ==
                                                                          c10::TypeKind::NoneType);
      if (IsKeyedGenerator(g)) {
        if (visit(node, true)) return true;
      } else if (none && visit(node, false)) {
        return true;
      }
      continue;
    }
    if (node->isNondeterministic() && visit(node, false)) return true;
  }
  return false;
}

at::Tensor KeyedDropout(const at::Tensor& input, double p, bool train, bool feature, bool alpha,
                        c10::optional<at::Generator> generator) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if (p == 0 || !train || input.numel() == 0) return input;
  if (p == 1) return input * at::zeros({}, input.options());
  at::Tensor noise;
  if (feature) {  // one draw per (example, channel), broadcast over the rest
    TORCH_CHECK(input.dim() >= 2,
                "Feature dropout requires at least 2 dimensions in the input");
    std::vector<int64_t> sizes{input.size(0), input.size(1)};
    sizes.resize(static_cast<size_t>(input.dim()), 1);
    noise = at::empty(sizes, input.options());
  } else {
    noise = at::empty_like(input, at::MemoryFormat::Contiguous);
  }
  noise.bernoulli_(1 - p, generator);
  if (!alpha) {
    noise.div_(1 - p);
    return input * noise;
  }
  constexpr double kAlpha = 1.7580993408473766;
  const double a = 1. / std::sqrt((kAlpha * kAlpha * p + 1) * (1 - p));
  at::Tensor b = noise.add(-1).mul_(kAlpha * a).add_(kAlpha * a * p);
  noise.mul_(a);
  return input * noise + b;
}

at::Tensor KeyedAttention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                          const c10::optional<at::Tensor>& attn_mask, double dropout_p,
                          bool is_causal, c10::optional<double> scale, bool enable_gqa,
                          c10::optional<at::Generator> generator) {
  if (dropout_p == 0 || !generator.has_value()) {
    return compat::ScaledDotProductAttention(query, key, value, attn_mask, dropout_p, is_causal,
                                             scale, enable_gqa);
  }
  at::Tensor k = key;
  at::Tensor v = value;
  if (enable_gqa && query.dim() >= 3 && key.size(-3) != query.size(-3)) {
    k = k.repeat_interleave(query.size(-3) / key.size(-3), -3);
    v = v.repeat_interleave(query.size(-3) / value.size(-3), -3);
  }
  const double scale_factor = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  at::Tensor scores = at::matmul(query, k.transpose(-2, -1)).mul(scale_factor);
  constexpr double kMaskedOut = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    at::Tensor keep = at::ones({query.size(-2), k.size(-2)}, query.options().dtype(at::kBool)).tril();
    scores = scores.masked_fill(keep.logical_not(), kMaskedOut);
  }
  if (attn_mask.has_value() && attn_mask->defined()) {
    scores = attn_mask->scalar_type() == at::kBool ? scores.masked_fill(attn_mask->logical_not(), kMaskedOut)
                                                   : scores + *attn_mask;
  }
  at::Tensor weights = compat::AttentionSoftmax(scores, -1);
  weights = KeyedDropout(weights, dropout_p, /*train=*/true, /*feature=*/false, /*alpha=*/false,
                         std::move(generator));
  return at::matmul(weights, v);
}

c10::optional<at::Generator> KeyedGeneratorOp(int64_t op) {
  std::optional<at::Generator> g = KeyedGenerator(op);
  if (!g) return c10::nullopt;
  return *g;
}

}  // namespace

std::optional<std::string> FirstUnkeyedRandomOp(const torch::jit::Graph& graph) {
  std::optional<std::string> first;
  ForEachRandomOp(graph.block(), [&](const torch::jit::Node* node, bool keyed) {
    if (keyed) return false;
    first = node->kind().toQualString();
    return true;
  });
  return first;
}

bool HasKeyedRandomOps(const torch::jit::Graph& graph) {
  return ForEachRandomOp(graph.block(), [](const torch::jit::Node*, bool keyed) { return keyed; });
}

void DefineKeyedRandomOps(torch::Library& m) {
  // Conservative (a side effect, to TorchScript): constant propagation, at
  // compile time or when a stage loads, must not fold it into the None it
  // returns outside a draw scope.
  m.def(torch::schema("keyed_generator(int op) -> Generator?", c10::AliasAnalysisKind::CONSERVATIVE),
        &KeyedGeneratorOp);
  m.def(
      "dropout(Tensor input, float p, bool train, bool feature, bool alpha, Generator? generator) "
      "-> Tensor",
      &KeyedDropout);
  m.def(
      "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, "
      "float dropout_p, bool is_causal, float? scale, bool enable_gqa, Generator? generator) -> "
      "Tensor",
      &KeyedAttention);
}

}  // namespace gpipe
