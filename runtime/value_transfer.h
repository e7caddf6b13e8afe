#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <ATen/core/ivalue.h>

#include "runtime/peer_group.h"

namespace gpipe {

// One value between two ranks: a fixed-size int64 header (what kind of value,
// dtype, shape, whether the sender's tensor carries gradient), then, for a
// tensor, its bytes. The receiver allocates from the header, so no shape has
// to be known in advance, and a value the protocol cannot carry is an error
// on the sending side. `message` identifies the value within one step; it
// uses the two c10d tags 2*message and 2*message+1.
//
// A tensor on the GPU that PeerGroup runs NCCL on travels over NCCL and
// arrives on the receiver's NCCL GPU; any other tensor travels through host
// memory (Gloo) and arrives on the CPU. Either is a fresh leaf with
// requires_grad as the sender's flag said.
//
// With a MessageMemory (a pipeline's, kept across steps), a value whose
// header is the one its message id carried last time travels as ONE message
// (its bytes with the header behind them), so a steady pipeline sends one
// message per value instead of two in sequence. Both sides remember the same
// header per message id (the sender what it sent, the receiver what it
// received), so the receiver posts a receive of the remembered size; when
// the value changed (another shape or kind, or it now goes over NCCL), the
// sender first sends a buffer of that size marked "header follows", then the
// value in two messages, and both remember the new header.
class MessageMemory;

void SendValue(PeerGroup& peers, const c10::IValue& value, bool carries_grad, int peer, int message,
               const std::string& what, MessageMemory* memory = nullptr);
c10::IValue RecvValue(PeerGroup& peers, int peer, int message, const std::string& what,
                      MessageMemory* memory = nullptr);

// The header each message id carried last, per direction and peer. Threading: the
// workers of one process send and receive concurrently; the mutex guards
// both maps (each message id is used by one task at a time).
class MessageMemory {
 public:
  static constexpr size_t kHeaderSize = 18;  // int64 fields (value_transfer.cpp)
  using Header = std::array<int64_t, kHeaderSize>;

  // Per (direction, peer, message id): a pair of ranks remembers alike.
  std::optional<Header> Last(bool sent, int peer, int message) const;
  void Remember(bool sent, int peer, int message, const std::optional<Header>& header);  // nullopt forgets

 private:
  mutable std::mutex mutex_;
  std::unordered_map<int64_t, Header> sent_, received_;  // key: peer << 32 | message
};

// A value's receive posted ahead of the task that takes it. Only a message
// whose header `memory` remembers is posted (its one message has a known
// size); otherwise nothing is (nullopt) and RecvValue receives as usual.
// Each posted value must be taken by TakePostedValue, once.
struct PostedValue {
  int peer = 0;
  int message = 0;
  std::string what;
  at::Tensor buffer;  // the remembered header's bytes, then the header
  MessageMemory::Header expected;
  std::shared_ptr<PeerGroup::PostedRecv> receive;
};
std::optional<PostedValue> PostValue(PeerGroup& peers, int peer, int message,
                                     const std::string& what, MessageMemory& memory);
c10::IValue TakePostedValue(PeerGroup& peers, PostedValue posted, MessageMemory& memory);

// A defined tensor that requires grad: the values whose gradients travel back.
inline bool CarriesGrad(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().requires_grad();
}

}  // namespace gpipe
