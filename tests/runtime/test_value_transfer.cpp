// Two ranks in one test process (two threads, a real TCPStore and Gloo group
// on loopback) exchange every kind of value the protocol carries.

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "runtime/peer_group.h"
#include "runtime/value_transfer.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

void WithTwoRanks(const std::function<void(PeerGroup&)>& body) {
  testing::RunRanksInThreads(2, [&](const std::shared_ptr<PeerGroup>& peers) { body(*peers); });
}

TEST(ValueTransfer, EveryKindArrivesAsSent) {
  at::Tensor sent = at::randn({3, 4, 2});
  WithTwoRanks([&](PeerGroup& peers) {
    if (peers.rank() == 0) {
      SendValue(peers, sent, true, 1, 0, "a tensor");
      SendValue(peers, at::arange(6, at::kLong).view({2, 3}), false, 1, 1, "an int64 tensor");
      SendValue(peers, at::empty({0, 5}), false, 1, 2, "an empty tensor");
      SendValue(peers, c10::IValue(int64_t{-7}), false, 1, 3, "an int");
      SendValue(peers, c10::IValue(0.125), false, 1, 4, "a float");
      SendValue(peers, c10::IValue(true), false, 1, 5, "a bool");
      SendValue(peers, c10::IValue(), false, 1, 6, "None");
      SendValue(peers, at::Tensor(), false, 1, 7, "an undefined tensor");
      peers.WaitSends();
      return;
    }
    at::Tensor t = RecvValue(peers, 0, 0, "a tensor").toTensor();
    EXPECT_TRUE(torch::equal(t, sent));
    EXPECT_TRUE(t.requires_grad());
    EXPECT_TRUE(t.is_leaf());
    at::Tensor ints = RecvValue(peers, 0, 1, "an int64 tensor").toTensor();
    EXPECT_EQ(ints.scalar_type(), at::kLong);
    EXPECT_TRUE(torch::equal(ints, at::arange(6, at::kLong).view({2, 3})));
    EXPECT_FALSE(ints.requires_grad());
    EXPECT_EQ(RecvValue(peers, 0, 2, "an empty tensor").toTensor().sizes(), (std::vector<int64_t>{0, 5}));
    EXPECT_EQ(RecvValue(peers, 0, 3, "an int").toInt(), -7);
    EXPECT_EQ(RecvValue(peers, 0, 4, "a float").toDouble(), 0.125);
    EXPECT_EQ(RecvValue(peers, 0, 5, "a bool").toBool(), true);
    EXPECT_TRUE(RecvValue(peers, 0, 6, "None").isNone());
    EXPECT_TRUE(RecvValue(peers, 0, 7, "an undefined tensor").isNone());
  });
}

// With a MessageMemory on both sides, message ids carry a sequence of values
// as a pipeline's steps do: the same shape again (one message: bytes and
// header), another shape, another kind, None and back, an empty tensor, each
// arriving as sent. A second message id interleaved keeps its own memory.
TEST(ValueTransfer, RememberedHeadersCarryEverySequenceOfValuesAsSent) {
  std::vector<c10::IValue> sequence = {at::randn({4, 3}), at::randn({4, 3}), at::randn({4, 3}),
                                       at::randn({2, 3}), at::randn({2, 3}),
                                       at::arange(6, at::kLong).view({3, 2}), c10::IValue(),
                                       c10::IValue(), c10::IValue(int64_t{5}), c10::IValue(int64_t{6}),
                                       at::empty({0, 3}), at::randn({4, 3}), at::randn({4, 3})};
  WithTwoRanks([&](PeerGroup& peers) {
    MessageMemory memory;
    for (size_t step = 0; step < sequence.size(); ++step) {
      const c10::IValue other = at::full({2}, static_cast<double>(step));
      if (peers.rank() == 0) {
        SendValue(peers, sequence[step], step % 2 == 0, 1, 3, "a value", &memory);
        SendValue(peers, other, false, 1, 4, "another", &memory);
        peers.WaitSends();  // a step ends with its sends received, as a pipeline's does
        continue;
      }
      const c10::IValue got = RecvValue(peers, 0, 3, "a value", &memory);
      const c10::IValue& want = sequence[step];
      ASSERT_EQ(got.tagKind(), want.isTensor() && !want.toTensor().defined() ? "None" : want.tagKind())
          << "step " << step;
      if (want.isTensor()) {
        EXPECT_TRUE(torch::equal(got.toTensor(), want.toTensor())) << "step " << step;
        EXPECT_EQ(got.toTensor().requires_grad(), step % 2 == 0) << "step " << step;
      } else if (!want.isNone()) {
        EXPECT_EQ(got, want) << "step " << step;
      }
      EXPECT_TRUE(torch::equal(RecvValue(peers, 0, 4, "another", &memory).toTensor(), other.toTensor()));
    }
  });
}

// A receive posted before the value is sent (as the pipeline posts its next
// RECV ahead) takes it, whatever the sequence: the same shape again, another
// shape (the sender's "header follows"), None; another message id received
// meanwhile is not taken by it. Nothing is posted before a header is known.
TEST(ValueTransfer, AReceivePostedBeforeTheSendTakesTheValueSent) {
  std::vector<c10::IValue> sequence = {at::randn({4, 3}), at::randn({4, 3}), at::randn({2, 3}),
                                       at::randn({2, 3}), c10::IValue(),     c10::IValue(),
                                       at::randn({4, 3}), at::randn({4, 3})};
  WithTwoRanks([&](PeerGroup& peers) {
    MessageMemory memory;
    for (size_t step = 0; step < sequence.size(); ++step) {
      const c10::IValue other = at::full({2}, static_cast<double>(step));
      if (peers.rank() == 0) {
        peers.Barrier("rank 1 posted");
        SendValue(peers, other, false, 1, 4, "another", &memory);
        SendValue(peers, sequence[step], true, 1, 3, "a value", &memory);
        peers.WaitSends();
        continue;
      }
      std::optional<PostedValue> posted = PostValue(peers, 0, 3, "a value", memory);
      EXPECT_EQ(posted.has_value(), step > 0) << "step " << step;
      peers.Barrier("rank 1 posted");
      EXPECT_TRUE(
          torch::equal(RecvValue(peers, 0, 4, "another", &memory).toTensor(), other.toTensor()));
      const c10::IValue got = posted ? TakePostedValue(peers, *std::move(posted), memory)
                                     : RecvValue(peers, 0, 3, "a value", &memory);
      const c10::IValue& want = sequence[step];
      ASSERT_EQ(got.tagKind(), want.tagKind()) << "step " << step;
      if (want.isTensor()) {
        EXPECT_TRUE(torch::equal(got.toTensor(), want.toTensor())) << "step " << step;
        EXPECT_TRUE(got.toTensor().requires_grad()) << "step " << step;
      }
    }
  });
}

TEST(ValueTransfer, AValueTheProtocolCannotCarryIsRefusedBeforeSending) {
  WithTwoRanks([&](PeerGroup& peers) {
    if (peers.rank() != 0) return;
    c10::List<int64_t> list({1, 2});
    try {
      SendValue(peers, c10::IValue(list), false, 1, 0, "stage 0's output 1 for micro-batch 0");
      ADD_FAILURE() << "a list was sent";
    } catch (const c10::Error& e) {
      EXPECT_EQ(std::string(e.what_without_backtrace()),
                "stage 0's output 1 for micro-batch 0 is a GenericList; only tensors, ints, floats, bools and "
                "None travel between ranks. Put its producer and consumer on one rank (--ranks) or cut the "
                "model elsewhere (--split-before)");
    }
  });
}

TEST(ValueTransfer, SameAsRankZeroNamesWhatDiffers) {
  WithTwoRanks([&](PeerGroup& peers) {
    peers.CheckSameAsRankZero("an artifact", "same");
    if (peers.rank() == 0) {
      peers.CheckSameAsRankZero("options (--steps)", "3");
      return;
    }
    try {
      peers.CheckSameAsRankZero("options (--steps)", "4");
      ADD_FAILURE() << "different options were accepted";
    } catch (const c10::Error& e) {
      EXPECT_EQ(std::string(e.what_without_backtrace()),
                "rank 1 was started with different options (--steps) than rank 0; start every rank with the "
                "same artifact and options");
    }
  });
}

}  // namespace
}  // namespace gpipe
