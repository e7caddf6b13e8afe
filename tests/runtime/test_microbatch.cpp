#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/microbatch.h"

namespace gpipe {
namespace {

TEST(MicroBatch, SplitsBatchedInputsEvenlyAndBroadcastsTheRest) {
  auto x = torch::arange(10).reshape({10, 1});
  auto mb = Scatter({x, c10::IValue(int64_t{7}), torch::tensor(3.0)}, 3);
  EXPECT_EQ(mb.sizes, (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(mb.batched, (std::vector<bool>{true, false, false}));
  ASSERT_EQ(mb.inputs.size(), 3u);
  EXPECT_TRUE(torch::equal(mb.inputs[1][0].toTensor(), torch::arange(4, 7).reshape({3, 1})));
  EXPECT_EQ(mb.inputs[2][1].toInt(), 7);
  std::vector<at::Tensor> parts;
  for (const auto& micro : mb.inputs) parts.push_back(micro[0].toTensor());
  EXPECT_TRUE(torch::equal(Gather(parts), x));
}

TEST(MicroBatch, ChunksLargerThanBatchIsAClearError) {
  try {
    Scatter({torch::zeros({4, 2})}, 8);
    FAIL();
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("chunks (8) is larger than the batch size (4)"),
              std::string::npos);
  }
}

TEST(MicroBatch, MismatchedBatchSizesAreAnError) {
  EXPECT_THROW(Scatter({torch::zeros({4, 2}), torch::zeros({5})}, 2), c10::Error);
  EXPECT_THROW(Scatter({c10::IValue(int64_t{1})}, 1), c10::Error);  // nothing batched
  EXPECT_THROW(Scatter({torch::zeros({4})}, 0), c10::Error);
}

}  // namespace
}  // namespace gpipe
