// Training on a real data set: the digits CNN from the CLI (metrics and the
// plot script) and from the C++ sample loop.

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::RunCli;
using testing::RunShell;
using testing::TempDir;
using testing::TestModel;

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// A fixed-seed run on a real data set (scikit-learn's 1797 digit images, the
// CNN sample at 2 stages x 2 micro-batches) reaches its stated accuracy and
// writes its metrics, which the plot script draws; the C++ sample loop
// (samples/train_digits.cpp: torch::optim, torch::data) trains the same
// pipeline as well.
TEST(Training, TheDigitsReachTheStatedAccuracyFromTheCliAndFromTheCppSample) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("cnn.pt") + " -o " + dir.path("c.gpipe") +
                                              " --stages 2 --chunks 2 --sample-input 64x1x8x8");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  auto run =
      RunCli("gpipe-run", dir.path("c.gpipe") + " --train --data " + TestModel("data_digits") +
                              " --eval-fraction 0.2 --epochs 3 --batch-size 64 --optimizer adam"
                              " --lr 3e-3 --eval-every 10 --log-every 5 --metrics-out " +
                              dir.path("m.jsonl"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_OUTPUT_HAS(
      run,
      "training on 1437 examples, evaluating on 360: batch 64, 23 batches per epoch, 69 steps");
  EXPECT_OUTPUT_HAS(run, "trained steps 1-69 in ");
  std::vector<nlohmann::json> metrics = ReadJsonLines(dir.path("m.jsonl"));
  std::vector<int64_t> steps, evaluated;
  for (const auto& line : metrics) {
    steps.push_back(line.at("step").get<int64_t>());
    for (const char* key : {"epoch", "loss", "lr", "samples_per_s"})
      EXPECT_TRUE(line.contains(key)) << line;
    if (line.contains("eval_loss")) evaluated.push_back(line.at("step").get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 69}));
  EXPECT_EQ(evaluated, (std::vector<int64_t>{10, 20, 30, 40, 50, 60, 69}));
  const double accuracy = metrics.back().at("eval_accuracy").get<double>();
  EXPECT_GE(accuracy, 0.95) << run.output;  // 98.6% on the machines we measured
  EXPECT_LT(metrics.back().at("loss").get<double>(), metrics.front().at("loss").get<double>());

  auto plotted =
      RunShell(std::string(GPIPE_PYTHON) + " " + GPIPE_SOURCE_DIR + "/scripts/plot_metrics.py " +
               dir.path("m.jsonl") + " " + dir.path("loss.svg"));
  ASSERT_EQ(plotted.exit_code, 0) << plotted.output;
  std::ifstream svg(dir.path("loss.svg"));
  const std::string drawing((std::istreambuf_iterator<char>(svg)),
                            std::istreambuf_iterator<char>());
  EXPECT_NE(drawing.find("eval accuracy"), std::string::npos);
  EXPECT_NE(drawing.find("<polyline"), std::string::npos);

  auto sample = RunShell(std::string(GPIPE_SAMPLES_BIN) + " " + dir.path("c.gpipe") + " " +
                         TestModel("data_digits") + " 2");
  ASSERT_EQ(sample.exit_code, 0) << sample.output;
  double sample_accuracy = 0;
  const size_t at = sample.output.find("epoch 2: ");
  ASSERT_NE(at, std::string::npos) << sample.output;
  ASSERT_EQ(std::sscanf(sample.output.c_str() + at, "epoch 2: train loss %*f, eval accuracy %lf%%",
                        &sample_accuracy),
            1)
      << sample.output;
  EXPECT_GE(sample_accuracy, 90.0) << sample.output;
}

}  // namespace
}  // namespace gpipe
