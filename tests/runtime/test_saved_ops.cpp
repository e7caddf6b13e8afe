// The replay ops of selective checkpointing give the gradients of the op they
// stand for, from a saved output they return as it is.

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <functional>

namespace gpipe {
namespace {

using Op = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// Runs `original` on leaves made from `inputs`, and `replay` on fresh leaves
// with original's output (detached) as the saved value; both outputs and
// every input gradient must match.
void ExpectSameGradients(const std::vector<at::Tensor>& inputs, const Op& original,
                         const Op& replay, const std::string& label) {
  auto leaves = [&] {
    std::vector<at::Tensor> out;
    for (const auto& t : inputs) out.push_back(t.defined() ? t.clone().requires_grad_(true) : t);
    return out;
  };
  std::vector<at::Tensor> want_in = leaves(), got_in = leaves();
  at::Tensor want = original(want_in);
  std::vector<at::Tensor> with_saved{want.detach()};
  with_saved.insert(with_saved.end(), got_in.begin(), got_in.end());
  at::Tensor got = replay(with_saved);
  EXPECT_TRUE(got.equal(want.detach())) << label << ": the replay returns the saved value";
  at::Tensor grad = at::randn_like(want);
  want.backward(grad);
  got.backward(grad);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].defined()) continue;
    ASSERT_TRUE(got_in[k].grad().defined()) << label << " input " << k;
    EXPECT_TRUE(at::allclose(got_in[k].grad(), want_in[k].grad(), 1e-5, 1e-6))
        << label << " input " << k << ": max diff "
        << (got_in[k].grad() - want_in[k].grad()).abs().max().item<double>();
  }
}

c10::IValue CallOp(const char* name, std::vector<c10::IValue> args) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  torch::jit::Stack stack(args.begin(), args.end());
  op.callBoxed(&stack);
  return stack.at(0);
}

TEST(SavedOps, LinearGradientsMatchAtensWithAndWithoutBiasForAnyLeadingShape) {
  at::manual_seed(0);
  for (auto shape : {std::vector<int64_t>{5, 3}, {2, 4, 3}, {3}}) {
    for (bool bias : {true, false}) {
      std::vector<at::Tensor> in{at::randn(shape), at::randn({6, 3}),
                                 bias ? at::randn({6}) : at::Tensor()};
      ExpectSameGradients(
          in, [](const auto& v) { return at::linear(v[0], v[1], v[2]); },
          [](const auto& v) {
            return CallOp("gpipe::saved_linear", {v[0], v[1], v[2], v[3]}).toTensor();
          },
          "linear " + c10::str(shape) + (bias ? " bias" : ""));
    }
  }
}

TEST(SavedOps, MatmulGradientsMatchAtensForEveryBroadcastCase) {
  at::manual_seed(1);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{4, 3}, {3, 5}},       {{2, 4, 3}, {3, 5}},    {{2, 2, 4, 3}, {2, 2, 3, 5}},
      {{2, 4, 3}, {1, 3, 5}}, {{3}, {3, 5}},          {{2, 4, 3}, {3}},
      {{3}, {3}},             {{4, 3}, {2, 3, 5}}};
  for (const auto& [a, b] : cases) {
    ExpectSameGradients(
        {at::randn(a), at::randn(b)}, [](const auto& v) { return at::matmul(v[0], v[1]); },
        [](const auto& v) { return CallOp("gpipe::saved_matmul", {v[0], v[1], v[2]}).toTensor(); },
        "matmul " + c10::str(a) + " @ " + c10::str(b));
  }
}

TEST(SavedOps, ConvolutionGradientsMatchAtensWithStridesGroupsAndUnbatchedInputs) {
  at::manual_seed(2);
  struct Case {
    std::vector<int64_t> input, weight, stride, padding, dilation;
    int64_t groups;
    bool bias;
  };
  const Case cases[] = {
      {{2, 4, 7, 7}, {6, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{2, 4, 8, 8}, {6, 2, 3, 3}, {2, 2}, {0, 1}, {1, 2}, 2, false},
      {{4, 7, 7}, {6, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{2, 4, 9}, {5, 4, 3}, {2}, {1}, {1}, 1, true},
  };
  for (const Case& c : cases) {
    std::vector<at::Tensor> in{at::randn(c.input), at::randn(c.weight),
                               c.bias ? at::randn({c.weight[0]}) : at::Tensor()};
    const bool one_d = c.weight.size() == 3;
    ExpectSameGradients(
        in,
        [&](const auto& v) {
          return one_d ? at::conv1d(v[0], v[1], v[2], c.stride, c.padding, c.dilation, c.groups)
                       : at::conv2d(v[0], v[1], v[2], c.stride, c.padding, c.dilation, c.groups);
        },
        [&](const auto& v) {
          return CallOp("gpipe::saved_convolution", {v[0], v[1], v[2], v[3], c.stride, c.padding,
                                                      c.dilation, c.groups})
              .toTensor();
        },
        "conv " + c10::str(c.input) + " * " + c10::str(c.weight));
  }
}

}  // namespace
}  // namespace gpipe
