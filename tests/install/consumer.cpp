// Compiles a TorchScript model into 2 stages, trains it one step, exports it
// back, through nothing but the installed <gpipe/gpipe.h> and its targets.
#include <cstdio>

#include <gpipe/gpipe.h>

#include "compiler/compile.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer MODEL.pt DIR\n");
    return 2;
  }
  const std::string artifact = std::string(argv[2]) + "/consumer.gpipe";
  gpipe::CompileOptions options;
  options.balance.num_stages = 2;
  options.chunks = 2;
  gpipe::CompileModel(argv[1], artifact, options);

  gpipe::Pipeline pipe = gpipe::Pipeline::load(artifact);
  pipe.train();
  at::Tensor x = at::randn({4, 16});
  const double loss = pipe.train_step(
      {x}, [](const std::vector<at::Tensor>& outputs) { return outputs[0].pow(2).mean(); });
  torch::jit::Module exported = gpipe::ExportModel(artifact);
  std::printf("gpipe %s (LibTorch %s): %zu stages, loss %.4f, exported %zu tensors\n",
              GPIPE_VERSION, GPIPE_TORCH_VERSION, pipe.num_stages(), loss,
              gpipe::StateDictOf(exported).size());
  return 0;
}
