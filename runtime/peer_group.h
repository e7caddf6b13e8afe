#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace gpipe {

// Which c10d backend carries tensors that live on a GPU. Host tensors (the
// message headers, random-number states, the loss) always go through Gloo.
enum class PeerBackend {
  kAuto,  // NCCL where this gpipe-cpp is built with CUDA and a GPU is present, else Gloo
  kGloo,  // GPU tensors are staged through host memory
  kNccl,  // GPU tensors go GPU to GPU; an error without a CUDA build or a GPU
};
PeerBackend ParsePeerBackend(const std::string& text);  // "auto", "gloo" or "nccl"
const char* PeerBackendName(PeerBackend backend);

// Where this process sits among the processes of a multi-process pipeline.
// The fields are torchrun's environment variables, so that gpipe-launch,
// torchrun --no-python and a cluster scheduler can all start gpipe-run.
struct PeerGroupOptions {
  int rank = 0;              // RANK
  int world_size = 1;        // WORLD_SIZE
  int local_world_size = 1;  // LOCAL_WORLD_SIZE: processes sharing this machine's cores
  int local_rank = 0;        // LOCAL_RANK (default RANK % LOCAL_WORLD_SIZE): picks the GPU for NCCL
  std::string master_addr;   // MASTER_ADDR: host of rank 0's TCPStore
  int master_port = 0;       // MASTER_PORT
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // any wait on a peer
  PeerBackend backend = PeerBackend::kAuto;
};

// Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_WORLD_SIZE and LOCAL_RANK;
// a missing or malformed variable is an error naming it.
PeerGroupOptions PeerGroupOptionsFromEnvironment();

// The processes of one pipeline, connected by c10d: a TCPStore rendezvous on
// rank 0, a Gloo process group, and with a CUDA build on a machine with GPUs
// a ProcessGroupNCCL beside it (as torch.distributed's default "cpu:gloo,
// cuda:nccl"): each tensor travels by the backend of the device it is on.
// The only file that includes c10d, so that LibTorch's API differences
// between versions stay here.
//
// NCCL matches a pair's sends and receives by their order, not by tag: the
// caller must issue each pair's GPU messages in the same order on both sides
// (Pipeline checks that each rank runs one stage when NCCL is on).
//
// Every failure of a peer (exited, crashed, or silent for longer than the
// timeout) becomes an error that names the peer and what was being waited for.
// Sends are asynchronous: they complete once the peer has received them, and
// WaitSends() waits for all of them.
class PeerGroup {
 public:
  explicit PeerGroup(const PeerGroupOptions& options);
  ~PeerGroup();
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.world_size; }
  const PeerGroupOptions& options() const { return options_; }

  // The GPU whose tensors travel over NCCL (cuda:LOCAL_RANK modulo the
  // GPUs present); nullopt when GPU tensors are staged through Gloo.
  std::optional<c10::Device> nccl_device() const;
  // Whether Send() would carry this tensor over NCCL (it is on a GPU and NCCL is on).
  bool UsesNccl(const at::Tensor& tensor) const;

  // `what` names the message in errors, e.g. "stage 1's output 0 for micro-batch 3".
  // A tensor on a GPU goes over NCCL when UsesNccl(); Recv() fills `tensor`
  // wherever it lives (through a host copy unless it is on nccl_device()).
  void Send(const at::Tensor& tensor, int peer, int tag, const std::string& what);
  void Recv(at::Tensor& tensor, int peer, int tag, const std::string& what);
  void WaitSends();

  // A receive started ahead of the task that needs it, so that its bytes
  // arrive (Gloo's handshake included) while this rank computes; WaitRecv
  // finishes it, with Recv's timeout and errors. Host tensors over Gloo only:
  // NCCL pairs messages by their order, which posting ahead would change.
  // Every posted receive must be waited for: one left behind would take the
  // next message sent with its tag.
  struct PostedRecv;
  std::shared_ptr<PostedRecv> PostRecv(const at::Tensor& host_tensor, int peer, int tag,
                                       const std::string& what);
  void WaitRecv(PostedRecv& posted);

  // Element-wise sum over every rank, in place; a collective call.
  void AllReduceSum(at::Tensor& tensor, const std::string& what);
  void Barrier(const std::string& what);

  // Fails on every rank whose `value` differs from rank 0's, naming `what`
  // (e.g. the artifact and options a rank was started with).
  void CheckSameAsRankZero(const std::string& what, const std::string& value);

 private:
  struct Impl;
  struct PendingSend;
  [[noreturn]] void Fail(const std::exception& e, int peer, const std::string& what) const;
  std::string FirstFailure(const std::string& report) const;

  PeerGroupOptions options_;
  std::unique_ptr<Impl> impl_;
  std::mutex pending_mutex_;
  std::vector<std::unique_ptr<PendingSend>> pending_;
};

}  // namespace gpipe
