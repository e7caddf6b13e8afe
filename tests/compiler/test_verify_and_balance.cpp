#include <gtest/gtest.h>
#include <torch/torch.h>

#include <boost/filesystem.hpp>
#include <numeric>

#include "compiler/compile.h"
#include "compiler/verify.h"
#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::RunCli;
using testing::TempDir;
using testing::TestModel;

TEST(Verify, FailsWhenTheArtifactComputesSomethingElse) {
  TempDir dir;
  CompileOptions options;
  options.balance.num_stages = 3;
  CompileModel(TestModel("mlp9.pt"), dir.path("m.gpipe"), options);
  auto specs = ParseInputSpecs("6x16");
  EXPECT_TRUE(VerifyArtifact(TestModel("mlp9.pt"), dir.path("m.gpipe"), specs, 1e-5).ok);
  {
    Pipeline pipe = Pipeline::load(dir.path("m.gpipe"));
    torch::NoGradGuard no_grad;
    pipe.named_parameters().at(2).second.add_(1e-3);  // a small change to one weight
    pipe.save(dir.path("m.gpipe"));
  }
  VerifyResult v = VerifyArtifact(TestModel("mlp9.pt"), dir.path("m.gpipe"), specs, 1e-5);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(v.has_float64);
  EXPECT_GT(v.pipeline_error, v.original_error);
}

TEST(BalanceBy, SizeIsolatesALayerHoldingMostParameters) {
  TempDir dir;
  CompileOptions options;
  options.balance.num_stages = 2;
  options.balance_by = BalanceBy::Size;
  options.sample_inputs = ParseInputSpecs("4x100");
  options.profile_steps = 1;
  auto report = CompileModel(TestModel("big_first.pt"), dir.path("b.gpipe"), options);
  ASSERT_EQ(report.manifest.stages.size(), 2u);
  EXPECT_EQ(report.manifest.stages[0].units, (std::vector<std::string>{"0"}));
  EXPECT_EQ(report.manifest.balance_method, "size");
  ASSERT_EQ(report.unit_costs.size(), 7u);
  EXPECT_GT(report.unit_costs[0], 0.85 * std::accumulate(report.unit_costs.begin(), report.unit_costs.end(), 0.0));
  // The costs are kept in the artifact.
  Pipeline pipe = Pipeline::load(dir.path("b.gpipe"));
  EXPECT_EQ(pipe.manifest().unit_costs, report.unit_costs);
  EXPECT_FALSE(boost::filesystem::exists(dir.path(".b.gpipe.profile.tmp")))
      << "profiling left its artifact";
}

TEST(BalanceBy, TimeBalancedTransformerStillVerifies) {
  TempDir dir;
  auto result = RunCli("gpipe-compile", TestModel("gpt.pt") + " -o " + dir.path("g.gpipe") +
                                            " --stages 3 --unit-depth 2 --balance-by time --profile-steps 2"
                                            " --chunks 2 --sample-input 4x12:int64:50 --verify");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("balance by time: max/mean stage cost"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("profiling units: step 3/3"), std::string::npos) << result.output;
  // Not a terminal: no progress redrawn with carriage returns, only the last line.
  EXPECT_EQ(result.output.find('\r'), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("profiling units: step 1/3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(" OK\n"), std::string::npos) << result.output;
}

TEST(BalanceBy, NeedsASampleInputAndEnoughUnits) {
  TempDir dir;
  auto no_input = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") + " --stages 2 --balance-by time");
  EXPECT_EQ(no_input.exit_code, 2);
  EXPECT_NE(no_input.output.find("--balance-by needs --sample-input"), std::string::npos);
  auto too_many = RunCli("gpipe-compile", TestModel("mlp9.pt") + " -o " + dir.path("m.gpipe") +
                                              " --stages 12 --balance-by time --sample-input 4x16");
  EXPECT_EQ(too_many.exit_code, 1);
  EXPECT_NE(too_many.output.find("cannot split 9 units into 12 stages"), std::string::npos) << too_many.output;
}

}  // namespace
}  // namespace gpipe
