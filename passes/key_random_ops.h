#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace gpipe {

// Makes every random op of `graph` draw from a keyed generator
// (runtime/keyed_random.h): op k (counted in graph order, blocks included,
// before any split, so k is the op's identity in the original model) draws
// from `gpipe::keyed_generator(k)`. Dropout and its variants, which have no
// generator argument in ATen, become `gpipe::dropout(..., generator)`;
// rand/randn/randint/randperm take their generator overloads;
// rand_like/randn_like/randint_like become empty_like + uniform_/normal_/random_;
// scaled_dot_product_attention (its dropout) becomes
// `gpipe::scaled_dot_product_attention(..., generator)`.
// Throws, naming the op, for a random op it cannot key. Returns true if the
// graph changed. Needs the runtime's op registrations (gpipe::dropout,
// gpipe::scaled_dot_product_attention, gpipe::keyed_generator) only when the
// graph runs, not to rewrite it.
bool KeyRandomOps(std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace gpipe
