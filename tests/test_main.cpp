// Test entry point. Every test runs with the simple graph executor: the
// default profiling executor re-optimises graphs after their first runs, which
// changed results in the last bits (~4e-9, see shared LIBTORCH-NOTES), so
// "bitwise equal" assertions would depend on how often a graph had run.
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

int main(int argc, char** argv) {
  torch::jit::getExecutorMode() = false;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
