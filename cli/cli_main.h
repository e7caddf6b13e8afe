#pragma once

#include <boost/filesystem.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include <c10/util/Exception.h>

#include "runtime/atomic_file.h"
#include "runtime/memory_tracker.h"
#include "runtime/pipeline_error.h"

namespace gpipe {

// Exit codes shared by every gpipe CLI.
constexpr int kExitError = 1;  // the input or the run failed (message on stderr)
constexpr int kExitUsage = 2;  // the command line itself is wrong

// Runs a CLI body, turning exceptions into one readable line on stderr.
// SIGXFSZ is ignored: over a file-size limit (ulimit -f) a write then fails
// with EFBIG and the save says so, instead of the process dying without a word.
inline int RunCli(const char* program, const std::function<int()>& body) {
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return body();
  } catch (const boost::program_options::error& e) {
    std::cerr << program << ": " << e.what() << "; see " << program << " --help\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << ErrorMessage(e) << "\n";
    return kExitError;
  }
}

// Parses a command line whose one positional argument is `positional_name`.
// Returns false after printing the help for --help (the caller exits 0);
// program_options errors propagate to RunCli.
inline bool ParseCommandLine(int argc, char** argv, const boost::program_options::options_description& opts,
                             const char* positional_name, boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  po::positional_options_description positional;
  positional.add(positional_name, 1);
  po::store(po::command_line_parser(argc, argv).options(opts).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

// Writes a text file as every gpipe output is written (runtime/atomic_file.h):
// a temporary first, flushed, renamed into place, so a failure never leaves
// half a file or a damaged earlier one.
inline void WriteFileAtomically(const std::string& path, const std::string& text) {
  WriteFileAtomically(path, "out.txt", [&](std::ostream& out, int&) { out << text; });
}

inline std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  for (char c : text) {
    if (c == ',') {
      out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  if (!text.empty()) out.push_back(item);
  return out;
}

}  // namespace gpipe
