#include "runtime/value_transfer.h"

#include <cstring>

#include <ATen/ATen.h>

namespace gpipe {
namespace {

constexpr int64_t kMagic = 0x67706970'00000002;  // "gpip", protocol 2
constexpr int64_t kMaxDims = 10;
enum Field : int64_t {
  kMagicField, kKind, kDtype, kCarriesGrad, kOverNccl, kRank, kSizes, kScalar = kSizes + kMaxDims, kHeaderSize
};
enum Kind : int64_t { kNone, kTensor, kInt, kDouble, kBool };

at::Tensor Header() { return at::zeros({kHeaderSize}, at::kLong); }

}  // namespace

void SendValue(PeerGroup& peers, const c10::IValue& value, bool carries_grad, int peer, int message,
               const std::string& what) {
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
  peers.Send(header, peer, 2 * message, what);
  if (payload.defined() && payload.numel() > 0) peers.Send(payload, peer, 2 * message + 1, what);
}

c10::IValue RecvValue(PeerGroup& peers, int peer, int message, const std::string& what) {
  at::Tensor header = Header();
  peers.Recv(header, peer, 2 * message, what);
  const int64_t* h = header.data_ptr<int64_t>();
  TORCH_CHECK(h[kMagicField] == kMagic && h[kRank] >= 0 && h[kRank] <= kMaxDims &&
                  h[kDtype] >= 0 && h[kDtype] < static_cast<int64_t>(at::ScalarType::NumOptions),
              "rank ", peer,
              " sent a malformed message for ", what,
              ": the ranks run different artifacts or gpipe-cpp versions; start them all with the same ones");
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
      if (t.numel() > 0) peers.Recv(t, peer, 2 * message + 1, what);
      if (h[kCarriesGrad] != 0) t.requires_grad_(true);
      return t;
    }
    default:
      TORCH_CHECK(false, "rank ", peer, " sent a value of unknown kind ", h[kKind], " for ", what,
                  ": the ranks run different gpipe-cpp versions");
  }
}

}  // namespace gpipe
