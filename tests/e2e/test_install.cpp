// The install tree as a LibTorch user meets it: `cmake --install` into a
// fresh prefix, then a project of its own that find_package(gpipe)s,
// includes <gpipe/gpipe.h>, links gpipe::runtime and gpipe::compiler, and
// runs; the installed CLIs run from their new place.

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::RunShell;
using testing::TempDir;

// tests/install/ as a user's project against the gpipe installed under
// `prefix`: configured, built and run; its output ("" if a step failed).
std::string ConfigureBuildAndRunConsumer(const std::string& prefix, const TempDir& dir) {
  const std::string build = dir.path("consumer");
  for (const std::string& command :
       {"cmake -S " + std::string(GPIPE_SOURCE_DIR) + "/tests/install -B " + build +
            " -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH='" + prefix + ";" +
            GPIPE_TORCH_PREFIX + "'",
        "cmake --build " + build,
        build + "/consumer " + testing::TestModel("mlp9.pt") + " " + dir.path("")}) {
    auto result = RunShell(command);
    EXPECT_EQ(result.exit_code, 0) << command << "\n" << result.output;
    if (result.exit_code != 0) return "";
    if (command.rfind(build + "/consumer", 0) == 0) return result.output;
  }
  return "";
}

TEST(Install, AProjectFindsThePackageBuildsAgainstItAndRuns) {
  TempDir dir;
  const std::string prefix = dir.path("prefix");
  auto installed = RunShell("cmake --install " + std::string(GPIPE_BINARY_DIR) + " --prefix " +
                            prefix + " 2>&1 | tail -3");
  ASSERT_EQ(installed.exit_code, 0) << installed.output;
  for (const char* file : {"include/gpipe/gpipe.h", "include/gpipe/version.h",
                           "include/gpipe/runtime/pipeline.h", "lib/cmake/gpipe/gpipeConfig.cmake",
                           "lib/cmake/gpipe/gpipeConfigVersion.cmake", "bin/gpipe-export"}) {
    EXPECT_TRUE(boost::filesystem::exists(prefix + "/" + file)) << file;
  }
  const std::string ran = ConfigureBuildAndRunConsumer(prefix, dir);
  EXPECT_NE(ran.find("gpipe " + std::string(GPIPE_PROJECT_VERSION) + " (LibTorch "),
            std::string::npos)
      << ran;
  EXPECT_NE(ran.find(": 2 stages, loss "), std::string::npos) << ran;
  auto help = RunShell(prefix + "/bin/gpipe-export --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_OUTPUT_HAS(help, "Usage: gpipe-export TRAINED.gpipe");
}

// CPack's .deb (what `cpack --config build/CPackConfig.cmake` writes): its
// control names LibTorch's Debian package, and unpacked anywhere it is a
// working, relocatable install tree.
TEST(Install, TheDebianPackageHoldsAWorkingInstall) {
  TempDir dir;
  auto packed = RunShell("cd " + dir.path("") + " && cpack -G DEB --config " +
                         std::string(GPIPE_BINARY_DIR) + "/CPackConfig.cmake 2>&1 | tail -2");
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  const std::string deb =
      dir.path("gpipe-cpp_" + std::string(GPIPE_PROJECT_VERSION) + "_amd64.deb");
  ASSERT_TRUE(boost::filesystem::exists(deb)) << packed.output;
  auto control = RunShell("dpkg-deb -f " + deb + " Package Depends");
  ASSERT_EQ(control.exit_code, 0) << control.output;
  EXPECT_OUTPUT_HAS(control, "Package: gpipe-cpp");
  EXPECT_OUTPUT_HAS(control, "Depends: libtorch-dev (>= ");
  ASSERT_EQ(RunShell("dpkg-deb -x " + deb + " " + dir.path("root")).exit_code, 0);
  const std::string prefix = dir.path("root") + "/usr";
  const std::string ran = ConfigureBuildAndRunConsumer(prefix, dir);
  EXPECT_NE(ran.find(": 2 stages, loss "), std::string::npos) << ran;
}

}  // namespace
}  // namespace gpipe
