// The ctest part of the model zoo sweep (bench/zoo.sh runs all of
// torchvision): small models of different families, each compiled with only
// --stages, --chunks 2 and a sample input, equal to the original (outputs and
// every gradient) within --verify's tolerance.

#include <gtest/gtest.h>

#include <boost/filesystem.hpp>

#include "compiler/compile.h"
#include "compiler/verify.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::TempDir;
using testing::TestModel;

struct ZooModel {
  const char* name;
  const char* sample;
  const char* variant = "";  // tells apart two samples for one model
};

void PrintTo(const ZooModel& m, std::ostream* os) { *os << m.name << m.variant; }

class Zoo : public ::testing::TestWithParam<ZooModel> {};

TEST_P(Zoo, VerifiesAtTwoAndFourStagesWithTheDefaults) {
  const ZooModel& m = GetParam();
  if (!boost::filesystem::exists(TestModel(std::string(m.name) + ".pt"))) {
    GTEST_SKIP() << m.name << ".pt was not exported: the test Python has no transformers/timm "
                 << "(scripts/run_tests_torch2.sh runs these)";
  }
  for (int64_t stages : {2, 4}) {
    TempDir dir;
    CompileOptions options;
    options.balance.num_stages = stages;
    options.chunks = 2;
    options.sample_inputs = ParseInputSpecs(m.sample);
    auto report =
        CompileModel(TestModel(std::string(m.name) + ".pt"), dir.path("z.gpipe"), options);
    EXPECT_EQ(report.manifest.stages.size(), static_cast<size_t>(stages));
    VerifyResult v = VerifyArtifact(TestModel(std::string(m.name) + ".pt"), dir.path("z.gpipe"),
                                    options.sample_inputs, 1e-5);
    EXPECT_TRUE(v.ok) << m.name << " at " << stages << " stages: output " << v.output_diff << " ("
                      << v.worst_output << "), grad " << v.grad_diff << " (" << v.worst_grad << ")";
    EXPECT_GT(v.parameters_compared, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Torchvision, Zoo,
    ::testing::Values(
        ZooModel{"tv_mobilenet_v3_small", "2x3x32x32"},  // inverted residuals, squeeze-excite
        ZooModel{"tv_squeezenet1_1", "2x3x64x64"},       // Fire modules: concatenated branches
        ZooModel{"tv_densenet_small", "2x3x32x32"},      // dense concatenation (a shared list)
        ZooModel{"tv_vit_tiny", "2x3x32x32"},            // encoder layers in an OrderedDict
        ZooModel{"tv_googlenet", "2x3x64x64"},           // NamedTuple output with None fields
        ZooModel{"tv_lraspp", "2x3x32x32"},              // segmentation: dict output, dict backbone
        ZooModel{"transformer_encoder", "src=2x6x16,src_key_padding_mask=2x6:bool"}),
    [](const ::testing::TestParamInfo<ZooModel>& info) { return std::string(info.param.name); });

// Exported by torch 2.x (transformers traced, timm scripted): only the
// build against pip's LibTorch loads them (they use scaled_dot_product_attention).
INSTANTIATE_TEST_SUITE_P(
    Torch2, Zoo,
    ::testing::Values(
        ZooModel{"hf_gpt2", "input_ids=2x16:int64:256"},  // head tied to the token embedding
        ZooModel{"hf_gpt2", "input_ids=2x16:int64:256,attention_mask=2x16:int64:2", "_padded"},
        ZooModel{"hf_llama", "input_ids=2x16:int64:256"},  // rotary, grouped-query attention
        ZooModel{"hf_bert", "input_ids=2x16:int64:256,attention_mask=2x16:int64:2"},
        ZooModel{"timm_vit", "2x3x32x32"}, ZooModel{"timm_convnext", "2x3x32x32"},
        ZooModel{"timm_resnet", "2x3x32x32"}),
    [](const ::testing::TestParamInfo<ZooModel>& info) {
      return std::string(info.param.name) + info.param.variant;
    });

}  // namespace
}  // namespace gpipe
