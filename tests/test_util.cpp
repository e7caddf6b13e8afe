#include "tests/test_util.h"

#include <array>
#include <atomic>
#include <cstdio>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "runtime/peer_group.h"

namespace gpipe::testing {

std::string TestModel(const std::string& name) {
  return (boost::filesystem::path(GPIPE_TEST_MODELS_DIR) / name).string();
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  dir_ = boost::filesystem::path(GPIPE_TEST_TMP_DIR) /
         ("t" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  boost::filesystem::create_directories(dir_);
}

TempDir::~TempDir() {
  boost::system::error_code ignored;
  boost::filesystem::remove_all(dir_, ignored);
}

std::string ErrorOf(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

std::string LastLine(const std::string& output) {
  size_t start = output.rfind('\n', output.size() >= 2 ? output.size() - 2 : 0);
  return start == std::string::npos ? output : output.substr(start + 1);
}

std::string CliPath(const std::string& tool) { return std::string(GPIPE_CLI_DIR) + "/" + tool; }

CommandResult RunCli(const std::string& tool, const std::string& arguments) {
  return RunShell(CliPath(tool) + " " + arguments);
}

CommandResult RunShell(const std::string& command_line) {
  std::string command = command_line + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

int FreeTcpPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  int port = -1;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

void RunRanksInThreads(int world, const std::function<void(const std::shared_ptr<PeerGroup>&)>& body) {
  const int port = FreeTcpPort();
  std::vector<std::future<void>> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&, rank] {
      PeerGroupOptions options;
      options.rank = rank;
      options.world_size = world;
      options.master_addr = "127.0.0.1";
      options.master_port = port;
      options.timeout = std::chrono::seconds(30);
      body(std::make_shared<PeerGroup>(options));
    }));
  }
  for (auto& r : ranks) r.wait();
  for (auto& r : ranks) r.get();
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0;
  return (a - b).abs().max().item<double>();
}

}  // namespace gpipe::testing
