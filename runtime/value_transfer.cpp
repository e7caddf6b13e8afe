#include "runtime/value_transfer.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include <ATen/ATen.h>

namespace gpipe {
namespace {

constexpr int64_t kMagic = 0x67706970'00000003;  // "gpip", protocol 3
constexpr int64_t kMaxDims = 10;
enum Field : int64_t {
  kMagicField, kKind, kDtype, kCarriesGrad, kOverNccl, kRank, kSizes, kScalar = kSizes + kMaxDims,
  kFollows,  // one message of the remembered size: 1 = "the header follows", 0 = "this is the value"
  kHeaderSize
};
static_assert(kHeaderSize == MessageMemory::kHeaderSize, "MessageMemory's header is this one");
enum Kind : int64_t { kNone, kTensor, kInt, kDouble, kBool };
constexpr int64_t kHeaderBytes = kHeaderSize * sizeof(int64_t);

at::Tensor Header() { return at::zeros({kHeaderSize}, at::kLong); }

MessageMemory::Header HeaderOf(const at::Tensor& header) {
  MessageMemory::Header h;
  std::memcpy(h.data(), header.data_ptr<int64_t>(), kHeaderBytes);
  return h;
}

// The bytes a tensor value of header `h` carries (0 for the other kinds).
int64_t PayloadBytes(const MessageMemory::Header& h) {
  if (h[kKind] != kTensor) return 0;
  int64_t numel = 1;
  for (int64_t d = 0; d < h[kRank]; ++d) numel *= h[kSizes + d];
  return numel * static_cast<int64_t>(c10::elementSize(static_cast<at::ScalarType>(h[kDtype])));
}

void CheckHeader(const int64_t* h, int peer, const std::string& what) {
  TORCH_CHECK(h[kMagicField] == kMagic && h[kRank] >= 0 && h[kRank] <= kMaxDims &&
                  h[kDtype] >= 0 && h[kDtype] < static_cast<int64_t>(at::ScalarType::NumOptions),
              "rank ", peer,
              " sent a malformed message for ", what,
              ": the ranks run different artifacts or gpipe-cpp versions; start them all with the same ones");
}

// The value a header describes; a tensor's bytes are filled in by `receive`.
c10::IValue ValueOf(const int64_t* h, int peer, const std::string& what, PeerGroup& peers,
                    const std::function<void(at::Tensor&)>& receive) {
  switch (h[kKind]) {
    case kNone:
      return c10::IValue();
    case kInt:
      return c10::IValue(h[kScalar]);
    case kBool:
      return c10::IValue(h[kScalar] != 0);
    case kDouble: {
      double d;
      std::memcpy(&d, &h[kScalar], sizeof d);
      return c10::IValue(d);
    }
    case kTensor: {
      std::vector<int64_t> sizes(h + kSizes, h + kSizes + h[kRank]);
      auto dtype = static_cast<at::ScalarType>(h[kDtype]);
      at::TensorOptions options = at::TensorOptions().dtype(dtype);
      if (h[kOverNccl] != 0) {
        TORCH_CHECK(peers.nccl_device().has_value(), "rank ", peer, " sent ", what,
                    " over NCCL, but this rank has no NCCL; start every rank with the same --backend");
        options = options.device(*peers.nccl_device());
      }
      at::Tensor t = at::empty(sizes, options);
      if (t.numel() > 0) receive(t);
      if (h[kCarriesGrad] != 0) t.requires_grad_(true);
      return t;
    }
    default:
      TORCH_CHECK(false, "rank ", peer, " sent a value of unknown kind ", h[kKind], " for ", what,
                  ": the ranks run different gpipe-cpp versions");
  }
}

}  // namespace

namespace {
int64_t KeyOf(int peer, int message) {
  return (static_cast<int64_t>(peer) << 32) | static_cast<uint32_t>(message);
}
}  // namespace

std::optional<MessageMemory::Header> MessageMemory::Last(bool sent, int peer, int message) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto& map = sent ? sent_ : received_;
  auto it = map.find(KeyOf(peer, message));
  if (it == map.end()) return std::nullopt;
  return it->second;
}

void MessageMemory::Remember(bool sent, int peer, int message, const std::optional<Header>& header) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& map = sent ? sent_ : received_;
  if (header) {
    map[KeyOf(peer, message)] = *header;
  } else {
    map.erase(KeyOf(peer, message));
  }
}

void SendValue(PeerGroup& peers, const c10::IValue& value, bool carries_grad, int peer, int message,
               const std::string& what, MessageMemory* memory) {
  at::Tensor header = Header();
  int64_t* h = header.data_ptr<int64_t>();
  h[kMagicField] = kMagic;
  at::Tensor payload;
  if (value.isNone() || (value.isTensor() && !value.toTensor().defined())) {
    h[kKind] = kNone;
  } else if (value.isTensor()) {
    payload = value.toTensor().detach();
    h[kOverNccl] = peers.UsesNccl(payload);
    if (!h[kOverNccl]) payload = payload.to(at::kCPU);
    payload = payload.contiguous();
    TORCH_CHECK(payload.dim() <= kMaxDims, what, " has ", payload.dim(), " dimensions; at most ", kMaxDims,
                " can travel between ranks");
    h[kKind] = kTensor;
    h[kDtype] = static_cast<int64_t>(payload.scalar_type());
    h[kCarriesGrad] = carries_grad;
    h[kRank] = payload.dim();
    for (int64_t d = 0; d < payload.dim(); ++d) h[kSizes + d] = payload.size(d);
  } else if (value.isInt()) {
    h[kKind] = kInt;
    h[kScalar] = value.toInt();
  } else if (value.isDouble()) {
    h[kKind] = kDouble;
    double d = value.toDouble();
    std::memcpy(&h[kScalar], &d, sizeof d);
  } else if (value.isBool()) {
    h[kKind] = kBool;
    h[kScalar] = value.toBool();
  } else {
    TORCH_CHECK(false, what, " is a ", value.tagKind(),
                "; only tensors, ints, floats, bools and None travel between ranks. Put its producer "
                "and consumer on one rank (--ranks) or cut the model elsewhere (--split-before)");
  }
  if (memory != nullptr) {
    if (std::optional<MessageMemory::Header> last = memory->Last(true, peer, message)) {
      const int64_t bytes = PayloadBytes(*last);
      at::Tensor one = at::empty({bytes + kHeaderBytes}, at::kByte);
      if (!h[kOverNccl] && HeaderOf(header) == *last) {  // the value, then its header: one message
        if (bytes > 0) std::memcpy(one.data_ptr(), payload.data_ptr(), static_cast<size_t>(bytes));
        std::memcpy(one.data_ptr<uint8_t>() + bytes, h, kHeaderBytes);
        peers.Send(one, peer, 2 * message + 1, what);
        return;
      }
      // The receiver waits for the remembered size: tell it the header follows.
      one.zero_();
      h[kFollows] = 1;
      std::memcpy(one.data_ptr<uint8_t>() + bytes, h, kHeaderBytes);
      h[kFollows] = 0;
      peers.Send(one, peer, 2 * message + 1, what);
    }
    memory->Remember(true, peer, message,
                     h[kOverNccl] ? std::nullopt : std::optional<MessageMemory::Header>(HeaderOf(header)));
  }
  peers.Send(header, peer, 2 * message, what);
  if (payload.defined() && payload.numel() > 0) peers.Send(payload, peer, 2 * message + 1, what);
}

namespace {

// The one message of a remembered header, received into `one`: the value,
// or nullopt when the sender said "the header follows" (the value changed).
std::optional<c10::IValue> ValueOfOne(PeerGroup& peers, const at::Tensor& one,
                                      const MessageMemory::Header& last, int peer,
                                      const std::string& what) {
  const int64_t bytes = PayloadBytes(last);
  int64_t h[kHeaderSize];
  std::memcpy(h, one.data_ptr<uint8_t>() + bytes, kHeaderBytes);
  CheckHeader(h, peer, what);
  // "The same value as last time" must say the remembered header, or the
  // bytes in the buffer are not the tensor the header describes.
  TORCH_CHECK(h[kFollows] == 1 || std::equal(h, h + kFollows, last.begin()), "rank ", peer,
              " sent a malformed message for ", what,
              ": the ranks run different artifacts or gpipe-cpp versions; start them all with the "
              "same ones");
  if (h[kFollows] == 1) return std::nullopt;
  return ValueOf(h, peer, what, peers, [&](at::Tensor& t) {
    std::memcpy(t.data_ptr(), one.data_ptr(), static_cast<size_t>(bytes));
  });
}

// The header, then the value it describes: the first message of a message
// id, or one whose value changed.
c10::IValue RecvHeaderAndValue(PeerGroup& peers, int peer, int message, const std::string& what,
                               MessageMemory* memory) {
  at::Tensor header = Header();
  peers.Recv(header, peer, 2 * message, what);
  const int64_t* h = header.data_ptr<int64_t>();
  CheckHeader(h, peer, what);
  if (memory != nullptr) {
    memory->Remember(false, peer, message,
                     h[kOverNccl] ? std::nullopt : std::optional<MessageMemory::Header>(HeaderOf(header)));
  }
  return ValueOf(h, peer, what, peers, [&](at::Tensor& t) { peers.Recv(t, peer, 2 * message + 1, what); });
}

}  // namespace

c10::IValue RecvValue(PeerGroup& peers, int peer, int message, const std::string& what,
                      MessageMemory* memory) {
  if (memory != nullptr) {
    if (std::optional<MessageMemory::Header> last = memory->Last(false, peer, message)) {
      at::Tensor one = at::empty({PayloadBytes(*last) + kHeaderBytes}, at::kByte);
      peers.Recv(one, peer, 2 * message + 1, what);
      if (std::optional<c10::IValue> value = ValueOfOne(peers, one, *last, peer, what)) {
        return *std::move(value);
      }
    }
  }
  return RecvHeaderAndValue(peers, peer, message, what, memory);
}

std::optional<PostedValue> PostValue(PeerGroup& peers, int peer, int message,
                                     const std::string& what, MessageMemory& memory) {
  std::optional<MessageMemory::Header> last = memory.Last(false, peer, message);
  if (!last) return std::nullopt;
  PostedValue posted{peer,  message,
                     what,  at::empty({PayloadBytes(*last) + kHeaderBytes}, at::kByte),
                     *last, nullptr};
  posted.receive = peers.PostRecv(posted.buffer, peer, 2 * message + 1, what);
  return posted;
}

c10::IValue TakePostedValue(PeerGroup& peers, PostedValue posted, MessageMemory& memory) {
  peers.WaitRecv(*posted.receive);
  if (std::optional<c10::IValue> value =
          ValueOfOne(peers, posted.buffer, posted.expected, posted.peer, posted.what)) {
    return *std::move(value);
  }
  return RecvHeaderAndValue(peers, posted.peer, posted.message, posted.what, &memory);
}

}  // namespace gpipe
