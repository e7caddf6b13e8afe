// A LibTorch training loop over a pipelined model, as a LibTorch user writes
// one for an unsplit model: torch::optim's AdamW over Pipeline::parameters(),
// torch::data's DataLoader (a random sampler, a background worker) over a
// streamed .npy data set, cross-entropy per micro-batch through
// Pipeline::train_step, and evaluation in eval mode without gradients.
//
//   /usr/bin/python3 samples/export_cnn.py --out cnn.pt
//   gpipe-compile cnn.pt -o cnn.gpipe --stages 4 --chunks 4 --sample-input 64x1x8x8
//   /usr/bin/python3 samples/make_dataset.py digits --out digits
//   build/samples/train_digits cnn.gpipe digits 3
//
// `pipe.forward(x)` followed by `loss.backward()` works too (the GPipe
// schedule); train_step with a per-micro-batch loss is the form every
// schedule can run.

#include <cstdio>
#include <string>

#include <torch/data.h>
#include <torch/optim.h>

#include "runtime/data_source.h"
#include "runtime/pipeline.h"
#include "runtime/training_loss.h"

namespace {

// Top-1 accuracy of `pipe` on `data`, pipelined, in eval mode.
double Accuracy(gpipe::Pipeline& pipe, std::shared_ptr<const gpipe::DataSource> data) {
  pipe.eval();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> all(static_cast<size_t>(data->size()));
  for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int64_t>(k);
  gpipe::DataBatch batch = data->Get(all);
  const double right =
      pipe.forward(batch.inputs.at(0)).argmax(1).eq(batch.targets).sum().item<double>();
  pipe.train();
  return right / static_cast<double>(data->size());
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 4) {
    std::fprintf(stderr, "usage: train_digits ARTIFACT.gpipe DATA_DIR EPOCHS\n");
    return 2;
  }
  gpipe::Pipeline pipe = gpipe::Pipeline::load(argv[1]);
  auto data = gpipe::OpenDataSource(argv[2]);  // inputs.npy + targets.npy, streamed from disk
  const int64_t held_out = data->size() / 5;
  auto train = gpipe::SliceDataSource(data, 0, data->size() - held_out);
  auto eval = gpipe::SliceDataSource(data, data->size() - held_out, data->size());
  const int epochs = std::stoi(argv[3]);

  torch::manual_seed(0);  // the sampler's shuffles and the dropout masks
  torch::optim::AdamW optimizer(pipe.parameters(), torch::optim::AdamWOptions(3e-3));
  std::vector<int64_t> in_order(static_cast<size_t>(train->size()));
  for (size_t k = 0; k < in_order.size(); ++k) in_order[k] = static_cast<int64_t>(k);
  auto loader = torch::data::make_data_loader(gpipe::DataSourceDataset(train, in_order),
                                              torch::data::samplers::RandomSampler(in_order.size()),
                                              torch::data::DataLoaderOptions(64).workers(1));
  const auto loss = gpipe::ParseLoss("cross_entropy");

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    double loss_sum = 0;
    int batches = 0;
    for (gpipe::DataBatch& batch : *loader) {
      optimizer.zero_grad();
      // Each micro-batch's share of the batch's mean loss (see LossShares).
      const gpipe::LossShares shares(loss, batch.targets);
      loss_sum += pipe.train_step(
          {batch.inputs.at(0)},
          [&](const gpipe::MicroBatchRows& rows, const std::vector<at::Tensor>& outputs) {
            return shares.Share(outputs.at(0), rows.offset, rows.size, rows.batch);
          });
      optimizer.step();
      ++batches;
    }
    std::printf("epoch %d: train loss %.4f, eval accuracy %.1f%%\n", epoch, loss_sum / batches,
                100 * Accuracy(pipe, eval));
  }
  return 0;
} catch (const std::exception& e) {
  auto* error = dynamic_cast<const c10::Error*>(&e);
  std::fprintf(stderr, "train_digits: %s\n", error ? error->what_without_backtrace() : e.what());
  return 1;
}
