#pragma once

#include <string>

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
void SendValue(PeerGroup& peers, const c10::IValue& value, bool carries_grad, int peer, int message,
               const std::string& what);
c10::IValue RecvValue(PeerGroup& peers, int peer, int message, const std::string& what);

// A defined tensor that requires grad: the values whose gradients travel back.
inline bool CarriesGrad(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().requires_grad();
}

}  // namespace gpipe
