#include "runtime/peer_group.h"

#include <cstdlib>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#ifdef GPIPE_WITH_NCCL  // a CUDA LibTorch (runtime/CMakeLists.txt also sets USE_C10D_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "runtime/pipeline_error.h"

#ifndef USE_C10D_GLOO
#error "gpipe_runtime needs c10d's Gloo backend: compile with USE_C10D_GLOO (runtime/CMakeLists.txt does)"
#endif

namespace gpipe {
namespace {

std::string Env(const char* name, bool required) {
  const char* value = std::getenv(name);
  TORCH_CHECK(value != nullptr || !required, name,
              " is not set; --distributed reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT "
              "as torchrun sets them (gpipe-launch --nproc N sets them for one machine)");
  return value == nullptr ? "" : value;
}

int EnvInt(const char* name, bool required, int fallback, int min, int max) {
  std::string text = Env(name, required);
  if (text.empty()) return fallback;
  size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == text.size() && value >= min && value <= max, name, "='", text,
              "' is not an integer in [", min, ", ", max, "]");
  return static_cast<int>(value);
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// Gloo talks to peers through one network device: the interface named by
// GLOO_SOCKET_IFNAME (as in PyTorch), loopback when rank 0 is local, else the
// address this machine's hostname resolves to.
std::shared_ptr<::gloo::transport::Device> GlooDevice(const std::string& master_addr) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  }
  if (IsLoopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

PeerBackend ParsePeerBackend(const std::string& text) {
  if (text == "auto") return PeerBackend::kAuto;
  if (text == "gloo") return PeerBackend::kGloo;
  if (text == "nccl") return PeerBackend::kNccl;
  TORCH_CHECK(false, "unknown backend '", text, "'; use auto, gloo or nccl");
}

const char* PeerBackendName(PeerBackend backend) {
  switch (backend) {
    case PeerBackend::kGloo:
      return "gloo";
    case PeerBackend::kNccl:
      return "nccl";
    default:
      return "auto";
  }
}

PeerGroupOptions PeerGroupOptionsFromEnvironment() {
  PeerGroupOptions options;
  options.world_size = EnvInt("WORLD_SIZE", true, 1, 1, 1 << 16);
  options.rank = EnvInt("RANK", true, 0, 0, options.world_size - 1);
  options.local_world_size = EnvInt("LOCAL_WORLD_SIZE", false, 1, 1, 1 << 16);
  options.master_addr = Env("MASTER_ADDR", true);
  TORCH_CHECK(!options.master_addr.empty(), "MASTER_ADDR is empty; set it to rank 0's host");
  options.master_port = EnvInt("MASTER_PORT", true, 0, 1, 65535);
  options.local_rank = EnvInt("LOCAL_RANK", false, options.rank % options.local_world_size, 0, 1 << 16);
  return options;
}

struct PeerGroup::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
  std::optional<c10::Device> nccl_device;  // set when `nccl` is
  int checks = 0;
#ifdef GPIPE_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
  c10d::Backend& Carrier(bool over_nccl) { return over_nccl ? static_cast<c10d::Backend&>(*nccl) : *gloo; }
  // A ProcessGroupNCCL beside Gloo, on the GPU of LOCAL_RANK; its keys get
  // their own prefix in the shared store.
  void StartNccl(const PeerGroupOptions& options) {
    const int gpus = c10::cuda::device_count();
    if (gpus == 0) {
      TORCH_CHECK(options.backend != PeerBackend::kNccl, "--backend nccl needs a GPU, and rank ", options.rank,
                  " sees none; use --backend gloo (or auto)");
      return;
    }
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = options.timeout;
    nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("nccl/", store),
                                                       options.rank, options.world_size, nccl_options);
    nccl_device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(options.local_rank % gpus));
  }
#else
  c10d::ProcessGroupGloo& Carrier(bool) { return *gloo; }
  void StartNccl(const PeerGroupOptions& options) {
    TORCH_CHECK(options.backend != PeerBackend::kNccl,
                "--backend nccl needs gpipe-cpp built against a LibTorch with CUDA, and this one (LibTorch ",
                TORCH_VERSION, ") has none; build it with scripts/setup_torch2.sh, or use --backend gloo");
  }
#endif
};

struct PeerGroup::PendingSend {
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor tensor;  // kept alive until the peer has it
  int peer;
  std::string what;
};

PeerGroup::PeerGroup(const PeerGroupOptions& options) : options_(options), impl_(std::make_unique<Impl>()) {
  TORCH_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
              "rank ", options.rank, " is outside a world of ", options.world_size, " processes");
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(options.master_port);
  store_options.isServer = options.rank == 0;
  store_options.numWorkers = static_cast<size_t>(options.world_size);
  store_options.waitWorkers = true;
  store_options.timeout = options.timeout;
  const std::string where = options.master_addr + ":" + std::to_string(options.master_port);
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
    auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo->devices.push_back(GlooDevice(options.master_addr));
    impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::static_intrusive_pointer_cast<c10d::Store>(impl_->store), options.rank, options.world_size, gloo);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "rank ", options.rank, " of ", options.world_size, " could not join the rendezvous at ",
                where, " within ", options.timeout.count() / 1000, " s: ", ErrorMessage(e),
                ". Start every rank with the same MASTER_ADDR/MASTER_PORT (rank 0 listens there) and "
                "WORLD_SIZE, and check that the port is free");
  }
  if (options.backend != PeerBackend::kGloo) impl_->StartNccl(options);
  // With --backend auto, a rank without a GPU would wait on NCCL messages forever.
  CheckSameAsRankZero("GPU tensors over NCCL (a GPU and --backend)", impl_->nccl_device ? "nccl" : "gloo");
}

std::optional<c10::Device> PeerGroup::nccl_device() const { return impl_->nccl_device; }

bool PeerGroup::UsesNccl(const at::Tensor& tensor) const {
  return impl_->nccl_device.has_value() && tensor.device() == *impl_->nccl_device;
}

PeerGroup::~PeerGroup() = default;

// One lost peer makes the ranks waiting on it fail, and then the ranks
// waiting on those: each would name only its own neighbour. The first rank
// to fail records what it lost in the store, and the others quote it.
std::string PeerGroup::FirstFailure(const std::string& report) const {
  try {
    impl_->store->setTimeout(std::chrono::seconds(5));  // the store's host may be the lost peer
    auto first = impl_->store->compareSet("gpipe/first_failure", {}, Bytes(report));
    return std::string(first.begin(), first.end());
  } catch (const std::exception&) {
    return "";
  }
}

void PeerGroup::Fail(const std::exception& e, int peer, const std::string& what) const {
  std::string who = peer >= 0 ? "rank " + std::to_string(peer) : "a peer";
  std::string report = "rank " + std::to_string(options_.rank) + " lost " + who + " while waiting for " + what;
  std::string first = FirstFailure(report);
  TORCH_CHECK(false, report, ": ", ErrorMessage(e), ". That process exited, crashed or did not answer within the timeout (",
              options_.timeout.count() / 1000, " s, --timeout-s); its own output says why",
              first.empty() || first == report ? "" : ". The first rank to fail reported: " + first);
}

void PeerGroup::Send(const at::Tensor& tensor, int peer, int tag, const std::string& what) {
  auto pending = std::make_unique<PendingSend>();
  const bool over_nccl = UsesNccl(tensor);
  pending->tensor = over_nccl ? tensor.contiguous() : tensor.to(at::kCPU).contiguous();
  pending->peer = peer;
  pending->what = what;
  std::vector<at::Tensor> tensors{pending->tensor};
  try {
    pending->work = impl_->Carrier(over_nccl).send(tensors, peer, tag);
  } catch (const std::exception& e) {
    Fail(e, peer, what);
  }
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.push_back(std::move(pending));
}

void PeerGroup::WaitSends() {
  std::vector<std::unique_ptr<PendingSend>> pending;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending.swap(pending_);
  }
  for (auto& p : pending) {
    try {
      p->work->wait(options_.timeout);
    } catch (const std::exception& e) {
      Fail(e, p->peer, p->what + " to be received");
    }
  }
}

void PeerGroup::Recv(at::Tensor& tensor, int peer, int tag, const std::string& what) {
  const bool over_nccl = UsesNccl(tensor);
  const bool direct = (over_nccl || tensor.is_cpu()) && tensor.is_contiguous();
  std::vector<at::Tensor> tensors{direct ? tensor : at::empty(tensor.sizes(), tensor.options().device(at::kCPU))};
  try {
    impl_->Carrier(over_nccl).recv(tensors, peer, tag)->wait(options_.timeout);
  } catch (const std::exception& e) {
    Fail(e, peer, what);
  }
  if (!direct) tensor.copy_(tensors[0]);
}

struct PeerGroup::PostedRecv {
  c10::intrusive_ptr<c10d::Work> work;
  int peer;
  std::string what;
};

std::shared_ptr<PeerGroup::PostedRecv> PeerGroup::PostRecv(const at::Tensor& host_tensor, int peer,
                                                           int tag, const std::string& what) {
  TORCH_INTERNAL_ASSERT(host_tensor.is_cpu() && host_tensor.is_contiguous(),
                        "a receive posted ahead fills a contiguous host tensor");
  auto posted = std::make_shared<PostedRecv>();
  posted->peer = peer;
  posted->what = what;
  std::vector<at::Tensor> tensors{host_tensor};
  try {
    posted->work = impl_->gloo->recv(tensors, peer, tag);
  } catch (const std::exception& e) {
    Fail(e, peer, what);
  }
  return posted;
}

void PeerGroup::WaitRecv(PostedRecv& posted) {
  try {
    posted.work->wait(options_.timeout);
  } catch (const std::exception& e) {
    Fail(e, posted.peer, posted.what);
  }
}

void PeerGroup::AllReduceSum(at::Tensor& tensor, const std::string& what) {
  std::vector<at::Tensor> tensors{tensor};
  try {
    TORCH_INTERNAL_ASSERT(tensor.is_cpu(), "AllReduceSum reduces host tensors (over Gloo)");
    impl_->gloo->allreduce(tensors)->wait(options_.timeout);
  } catch (const std::exception& e) {
    Fail(e, -1, what);
  }
}

void PeerGroup::Barrier(const std::string& what) {
  try {
    impl_->gloo->barrier()->wait(options_.timeout);
  } catch (const std::exception& e) {
    Fail(e, -1, what);
  }
}

void PeerGroup::CheckSameAsRankZero(const std::string& what, const std::string& value) {
  const std::string key = "gpipe/check/" + std::to_string(impl_->checks++);
  std::vector<uint8_t> expected;
  try {
    if (options_.rank == 0) impl_->store->set(key, Bytes(value));
    expected = impl_->store->get(key);
  } catch (const std::exception& e) {
    Fail(e, 0, what + " of rank 0");
  }
  TORCH_CHECK(expected == Bytes(value), "rank ", options_.rank, " was started with different ", what,
              " than rank 0; start every rank with the same artifact and options");
}

}  // namespace gpipe
