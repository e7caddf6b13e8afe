#pragma once

#include <boost/filesystem.hpp>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

// A command's output contains `text`; on failure, prints the whole output.
#define EXPECT_OUTPUT_HAS(result, text) \
  EXPECT_NE((result).output.find(text), std::string::npos) << (result).output

namespace gpipe {
class PeerGroup;
}

namespace gpipe::testing {

// A model written by tests/export_test_models.py (the test_models fixture).
std::string TestModel(const std::string& name);

// A fresh directory under the build tree, removed when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  boost::filesystem::path dir_;
};

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

// Runs one of the project's CLIs (gpipe-compile, gpipe-run) with arguments.
CommandResult RunCli(const std::string& tool, const std::string& arguments);

// Runs a shell command line (stderr joined to stdout).
CommandResult RunShell(const std::string& command);

// Absolute path of one of the project's CLIs.
std::string CliPath(const std::string& tool);

// A loopback TCP port that was free a moment ago (for rendezvous in tests).
int FreeTcpPort();

// Runs `body` as every rank of a fresh `world`-process group, one thread per
// rank in this process (a real TCPStore and Gloo group on loopback); returns
// after all have finished and rethrows the first failure.
void RunRanksInThreads(int world, const std::function<void(const std::shared_ptr<PeerGroup>&)>& body);

// The message (without backtrace) of the c10::Error `call` throws; "" if none.
std::string ErrorOf(const std::function<void()>& call);

// The last line of a command's output (a CLI's error comes after its other output).
std::string LastLine(const std::string& output);

// Largest |a - b|; both must have the same shape.
double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b);

}  // namespace gpipe::testing
