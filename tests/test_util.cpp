#include "tests/test_util.h"

#include <array>
#include <atomic>
#include <cstdio>

#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

namespace gpipe::testing {

std::string TestModel(const std::string& name) {
  return (std::filesystem::path(GPIPE_TEST_MODELS_DIR) / name).string();
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  dir_ = std::filesystem::path(GPIPE_TEST_TMP_DIR) /
         ("t" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(dir_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
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

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0;
  return (a - b).abs().max().item<double>();
}

}  // namespace gpipe::testing
