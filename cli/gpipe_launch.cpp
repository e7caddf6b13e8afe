// gpipe-launch: starts the ranks of a multi-process pipeline on this machine,
// as torchrun does for Python: N `gpipe-run --distributed` processes with
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// set, their output prefixed with the rank.
//
// A rank that fails does not take the others down with it: they notice the
// lost peer themselves and say so (that message is the useful one), and only
// ranks still running --grace-s after the first failure are killed.

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/filesystem.hpp>
#include <chrono>
#include <csignal>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/io.hpp>
#include <boost/process/pipe.hpp>
#include <boost/program_options.hpp>

#include "cli/cli_main.h"

namespace bp = boost::process;
namespace po = boost::program_options;

namespace {

constexpr int kMaxRanks = 1024;
std::atomic<pid_t> child_pids[kMaxRanks];
std::atomic<int> num_children{0};

// Ctrl-C in a terminal reaches every rank (one process group); a SIGINT,
// SIGTERM (timeout, Slurm, docker stop) or SIGHUP sent to the launcher alone
// is passed on. Each rank then finishes its step, saves and exits 128 + the
// signal, and the launcher waits for that. A launcher killed outright
// (SIGKILL) cannot pass anything on: each rank asked the kernel for a SIGTERM
// when its parent dies (gpipe-run, GPIPE_LAUNCHER_PID).
void ForwardSignal(int signal) {
  for (int r = 0; r < num_children.load(); ++r) {
    pid_t pid = child_pids[r].load();
    if (pid > 0) ::kill(pid, signal);
  }
}

// A port the kernel says is free now (as torchrun --standalone picks one).
int FreePort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0));
  return acceptor.local_endpoint().port();
}

// The launcher's own options come first; everything from the artifact on
// belongs to gpipe-run.
size_t LauncherArgumentCount(int argc, char** argv) {
  static const std::vector<std::string> kWithValue = {"--nproc", "--nnodes", "--node-rank", "--master-addr",
                                                      "--master-port", "--grace-s"};
  int i = 1;
  while (i < argc) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      ++i;
      continue;
    }
    bool known = false;
    for (const auto& name : kWithValue) {
      if (arg == name) {
        known = true;
        i += 2;
      } else if (arg.rfind(name + "=", 0) == 0) {
        known = true;
        i += 1;
      }
      if (known) break;
    }
    if (!known) break;
  }
  return static_cast<size_t>(std::min(i, argc));
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

int ExitCodeOf(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

int Main(int argc, char** argv) {
  int nproc = 0, nnodes = 1, node_rank = 0, master_port = 0, grace_s = 30;
  std::string master_addr = "127.0.0.1";
  po::options_description opts(
      "Usage: gpipe-launch --nproc N [options] ART.gpipe [gpipe-run options]\n"
      "Starts N ranks of `gpipe-run ART.gpipe --distributed [gpipe-run options]` on this machine\n"
      "with torchrun's environment variables set; with --nnodes, run it once per machine.\n\nOptions");
  opts.add_options()
      ("help,h", "print this help and exit")
      ("nproc", po::value(&nproc), "ranks to start on this machine (required)")
      ("nnodes", po::value(&nnodes)->default_value(1), "machines taking part, each running gpipe-launch")
      ("node-rank", po::value(&node_rank)->default_value(0), "this machine's index (0 runs rank 0)")
      ("master-addr", po::value(&master_addr)->default_value("127.0.0.1"), "host of node 0")
      ("master-port", po::value(&master_port)->default_value(0),
       "port of rank 0's rendezvous (0 = a free one; needed with --nnodes > 1)")
      ("grace-s", po::value(&grace_s)->default_value(30),
       "after a rank fails, seconds to wait for the others to notice before killing them");
  const size_t own = LauncherArgumentCount(argc, argv);
  po::variables_map vm;
  po::store(po::command_line_parser(static_cast<int>(own), argv).options(opts).run(), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  po::notify(vm);
  // After the artifact every option is gpipe-run's: a --nproc there is not seen.
  if (!vm.count("nproc")) {
    throw po::error(
        "--nproc N is required and goes before the artifact: gpipe-launch --nproc N ART.gpipe "
        "[gpipe-run options]");
  }
  if (nproc < 1 || nproc > kMaxRanks) throw po::error("--nproc must be between 1 and 1024");
  if (nnodes < 1 || node_rank < 0 || node_rank >= nnodes) throw po::error("--node-rank must be in [0, --nnodes)");
  if (master_port < 0 || master_port > 65535) throw po::error("--master-port must be a port number");
  if (nnodes > 1 && master_port == 0) throw po::error("--nnodes > 1 needs the same --master-port on every machine");
  if (grace_s < 0) throw po::error("--grace-s must be 0 or more");
  std::vector<std::string> run_args(argv + own, argv + argc);
  if (run_args.empty() || run_args[0].rfind("-", 0) == 0) {
    throw po::error("the artifact is missing: gpipe-launch --nproc N ART.gpipe [gpipe-run options]");
  }
  run_args.push_back("--distributed");
  if (master_port == 0) master_port = FreePort();

  const auto gpipe_run =
      boost::filesystem::read_symlink("/proc/self/exe").parent_path() / "gpipe-run";
  TORCH_CHECK(boost::filesystem::exists(gpipe_run),
              "gpipe-run is not next to gpipe-launch (looked for ", gpipe_run.string(), ")");
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, ForwardSignal);

  std::mutex print_mutex;
  std::vector<bp::child> children;
  std::vector<std::thread> printers;
  std::vector<bp::ipstream> outputs(static_cast<size_t>(nproc));
  const int world = nproc * nnodes;
  for (int local = 0; local < nproc; ++local) {
    const int rank = node_rank * nproc + local;
    bp::environment env = boost::this_process::environment();
    env["RANK"] = std::to_string(rank);
    env["WORLD_SIZE"] = std::to_string(world);
    env["LOCAL_RANK"] = std::to_string(local);
    env["LOCAL_WORLD_SIZE"] = std::to_string(nproc);
    env["MASTER_ADDR"] = master_addr;
    env["MASTER_PORT"] = std::to_string(master_port);
    env["GPIPE_LAUNCHER_PID"] = std::to_string(::getpid());
    children.emplace_back(bp::exe = gpipe_run.string(), bp::args = run_args, bp::env = env,
                          (bp::std_out & bp::std_err) > outputs[local]);
    child_pids[local] = children.back().id();
    num_children = local + 1;
    printers.emplace_back([&print_mutex, &stream = outputs[local], rank] {
      std::string line;
      while (std::getline(stream, line)) {
        std::lock_guard<std::mutex> lock(print_mutex);
        std::cout << "[rank " << rank << "] " << line << std::endl;
      }
    });
  }

  // Wait for every rank; once one has failed, give the rest --grace-s.
  std::vector<int> status(static_cast<size_t>(nproc), 0);
  std::vector<bool> running(static_cast<size_t>(nproc), true);
  std::optional<std::chrono::steady_clock::time_point> first_failure;
  bool killed = false;
  for (int left = nproc; left > 0;) {
    for (int r = 0; r < nproc; ++r) {
      if (!running[r]) continue;
      int raw = 0;
      pid_t pid = ::waitpid(children[r].id(), &raw, WNOHANG);
      if (pid == 0) continue;
      running[r] = false;
      status[r] = raw;
      --left;
      if (ExitCodeOf(raw) != 0 && !first_failure) first_failure = std::chrono::steady_clock::now();
    }
    if (left > 0 && first_failure && !killed &&
        std::chrono::steady_clock::now() - *first_failure > std::chrono::seconds(grace_s)) {
      for (int r = 0; r < nproc; ++r) {
        if (!running[r]) continue;
        std::lock_guard<std::mutex> lock(print_mutex);
        std::cout << "[launch] rank " << node_rank * nproc + r << " still runs " << grace_s
                  << " s after another rank failed; killing it" << std::endl;
        ::kill(children[r].id(), SIGKILL);
      }
      killed = true;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& c : children) c.detach();  // reaped above with waitpid
  for (auto& t : printers) t.join();

  int exit_code = 0;
  for (int r = 0; r < nproc; ++r) {
    int code = ExitCodeOf(status[r]);
    if (code == 0) continue;
    std::cout << "[launch] rank " << node_rank * nproc + r << " " << DescribeExit(status[r]) << std::endl;
    if (exit_code == 0) exit_code = code;
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  return gpipe::RunCli("gpipe-launch", [&] { return Main(argc, argv); });
}
