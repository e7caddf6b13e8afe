// Training on data files: the pipeline trained by the Trainer ends with the
// weights of the original model trained by the plain LibTorch loop a user
// would write, and gpipe-run --train --data reports what a user needs.

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/script.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "runtime/optimizer_setup.h"
#include "runtime/trainer.h"
#include "tests/e2e/pipeline_harness.h"
#include "tests/test_util.h"

namespace gpipe {
namespace {

using testing::ErrorOf;
using testing::Options;
using testing::RunCli;
using testing::TempDir;
using testing::TestModel;

// The loop as a LibTorch user writes it for the unsplit model: the epoch's
// order from its own generator, cross-entropy, accumulation over `accum`
// batches (an epoch's last, partial group averaged over what it has),
// torch::nn::utils::clip_grad_norm_, the schedule, Adam.
void TrainOriginal(torch::jit::Module& model, const DataSource& data, const TrainerOptions& o,
                   int64_t epochs) {
  std::vector<at::Tensor> params;
  for (const auto& p : model.parameters()) params.push_back(p);
  auto optimizer = MakeOptimizer(params, o.optimizer);
  const int64_t n = data.size();
  const int64_t batches = (n + o.batch_size - 1) / o.batch_size;
  const int64_t total = epochs * ((batches + o.grad_accum - 1) / o.grad_accum);
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    auto generator =
        at::make_generator<at::CPUGeneratorImpl>(o.seed + static_cast<uint64_t>(epoch));
    at::Tensor order = at::randperm(n, generator, at::kLong);
    for (int64_t first = 0; first < batches; first += o.grad_accum) {
      optimizer->zero_grad();
      const int64_t group = std::min(o.grad_accum, batches - first);
      for (int64_t b = first; b < first + group; ++b) {
        at::Tensor rows =
            order.narrow(0, b * o.batch_size, std::min(o.batch_size, n - b * o.batch_size));
        DataBatch batch = data.Get(std::vector<int64_t>(rows.data_ptr<int64_t>(),
                                                        rows.data_ptr<int64_t>() + rows.numel()));
        at::Tensor logits = model.forward({batch.inputs[0]}).toTensor();
        (at::cross_entropy_loss(logits, batch.targets) / static_cast<double>(group)).backward();
      }
      torch::nn::utils::clip_grad_norm_(params, *o.clip_grad_norm);
      SetLearningRate(*optimizer, LearningRateAt(o.schedule, o.optimizer.lr, ++step, total));
      optimizer->step();
    }
  }
}

TEST(Training, TrainerEndsWithTheWeightsOfThePlainLoopOnTheOriginal) {
  TempDir dir;
  CompileModel(TestModel("big_first.pt"), dir.path("m.gpipe"), Options(2, 4));
  Pipeline pipe = Pipeline::load(dir.path("m.gpipe"));
  auto all = OpenDataSource(TestModel("data_cls"));
  auto train = SliceDataSource(all, 0, 40);
  TrainerOptions options;
  options.batch_size = 12;  // 12, 12, 12 and an uneven 4
  options.epochs = 2;
  options.seed = 5;
  options.grad_accum = 3;  // steps of 3 batches and of the last 1
  options.clip_grad_norm = 0.5;
  options.loss = ParseLoss("cross_entropy");
  options.optimizer.name = "adam";
  options.optimizer.lr = 0.01;
  options.schedule = ParseLrSchedule("cosine", 1);
  Trainer trainer(pipe, train, SliceDataSource(all, 40, 50), options);
  EXPECT_EQ(trainer.total_steps(), 4);
  std::vector<StepReport> steps;
  std::vector<EvalReport> evals;
  EXPECT_EQ(trainer.Run([&](const StepReport& r) { steps.push_back(r); },
                        [&](const EvalReport& r) { evals.push_back(r); }, [] { return false; }),
            4);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].lr, 0.0);  // warm-up from 0, as Hugging Face's schedules
  EXPECT_EQ(steps[1].examples, 4);
  EXPECT_TRUE(steps[0].grad_norm.has_value());
  ASSERT_EQ(evals.size(), 1u);  // at the end
  EXPECT_EQ(evals[0].examples, 10);
  ASSERT_TRUE(evals[0].accuracy.has_value());

  auto original = torch::jit::load(TestModel("big_first.pt"));
  original.train();
  TrainOriginal(original, *train, options, 2);
  std::map<std::string, at::Tensor> want;
  for (const auto& p : original.named_parameters()) want[p.name] = p.value;
  for (const auto& [name, p] : pipe.named_parameters()) {
    EXPECT_LE(testing::MaxAbsDiff(p, want.at(name)), 1e-5) << name;
  }
  // Evaluation: the mean loss and accuracy of the held-out examples, in eval mode.
  original.eval();
  DataBatch held_out = all->Get({40, 41, 42, 43, 44, 45, 46, 47, 48, 49});
  at::Tensor logits = original.forward({held_out.inputs[0]}).toTensor();
  EvalReport eval = trainer.Evaluate(4);
  EXPECT_NEAR(eval.loss, at::cross_entropy_loss(logits, held_out.targets).item<double>(), 1e-5);
  EXPECT_DOUBLE_EQ(*eval.accuracy, logits.argmax(1).eq(held_out.targets).sum().item<double>() / 10);
}

// The loss computed per micro-batch (as 1F1B-style schedules need it) gives
// the gradients of the whole mini-batch's mean loss, even when the ignored
// tokens fall unevenly across micro-batches (the mean of the micro-batches'
// means would not).
TEST(Training, PerMicroBatchLossSharesGiveTheWholeBatchsGradients) {
  TempDir dir;
  CompileModel(TestModel("gpt.pt"), dir.path("g.gpipe"), Options(2, 3));
  Pipeline pipe = Pipeline::load(dir.path("g.gpipe"));
  pipe.eval();  // no dropout, so both sides compute the same function
  at::manual_seed(3);
  at::Tensor tokens = at::randint(50, {5, 8}, at::kLong);  // micro-batches of 2, 2 and 1 rows
  at::Tensor targets = at::randint(50, {5, 8}, at::kLong);
  targets.select(0, 0).narrow(0, 0, 6).fill_(-100);
  targets.select(0, 4).narrow(0, 1, 7).fill_(-100);  // the last micro-batch counts one token
  const LossOptions loss = ParseLoss("cross_entropy");
  const LossShares shares(loss, targets);
  std::vector<double> micro_batch_means;
  const double pipelined = pipe.train_step({tokens}, [&](const MicroBatchRows& rows,
                                                         const std::vector<at::Tensor>& outputs) {
    micro_batch_means.push_back(
        ComputeLoss(loss, outputs[0], targets.narrow(0, rows.offset, rows.size)).item<double>());
    return shares.Share(outputs[0], rows.offset, rows.size, rows.batch);
  });
  ASSERT_EQ(micro_batch_means.size(), 3u);

  auto original = torch::jit::load(TestModel("gpt.pt"));
  original.eval();
  at::Tensor whole = ComputeLoss(loss, original.forward({tokens}).toTensor(), targets);
  whole.backward();
  EXPECT_NEAR(pipelined, whole.item<double>(), 1e-5);
  const double mean_of_means =
      (micro_batch_means[0] + micro_batch_means[1] + micro_batch_means[2]) / 3;
  EXPECT_GT(std::abs(mean_of_means - whole.item<double>()), 1e-3);  // the naive split would differ
  std::map<std::string, at::Tensor> want;
  for (const auto& p : original.named_parameters()) want[p.name] = p.value.grad();
  for (const auto& [name, p] : pipe.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_LE(testing::MaxAbsDiff(p.grad(), want.at(name)), 1e-5) << name;
  }
}

// A label outside the model's classes is our one line, not ATen's
// "Target 108 is out of bounds."; an ignored label may be anything.
TEST(Training, ALabelOutsideTheClassesNamesItAndTheRange) {
  const at::Tensor logits = at::zeros({3, 10});
  for (const char* kind : {"cross_entropy", "nll"}) {
    const LossOptions loss = ParseLoss(kind, -100);
    EXPECT_EQ(testing::ErrorOf([&] {
                ComputeLoss(loss, logits, at::tensor({1, 108, 2}));
              }),
              std::string("--loss ") + kind +
                  " got label 108, outside the model's 10 classes (0 to 9); check the data's "
                  "targets, or mark labels to skip with --ignore-index");
    EXPECT_EQ(testing::ErrorOf([&] {
                LossShares(loss, at::tensor({-3, 1, 2})).Share(logits, 0, 3, 3);
              }),
              std::string("--loss ") + kind +
                  " got label -3, outside the model's 10 classes (0 to 9); check the data's "
                  "targets, or mark labels to skip with --ignore-index");
    EXPECT_EQ(testing::ErrorOf([&] { ComputeLoss(loss, logits, at::tensor({1, -100, 2})); }), "");
  }
}

TEST(Training, LearningRateSchedulesMatchTheirDefinitions) {
  // Warm-up over 2 of 6 steps, then decay over the other 4, from base 1.
  std::vector<double> cosine, linear, constant;
  for (int64_t step = 1; step <= 6; ++step) {
    cosine.push_back(LearningRateAt(ParseLrSchedule("cosine", 2), 1.0, step, 6));
    linear.push_back(LearningRateAt(ParseLrSchedule("linear", 2), 1.0, step, 6));
    constant.push_back(LearningRateAt(ParseLrSchedule("constant", 2), 1.0, step, 6));
  }
  EXPECT_EQ(linear, (std::vector<double>{0, 0.5, 1, 0.75, 0.5, 0.25}));
  EXPECT_EQ(constant, (std::vector<double>{0, 0.5, 1, 1, 1, 1}));
  const std::vector<double> want{
      0, 0.5, 1, 0.5 * (1 + std::cos(M_PI / 4)), 0.5, 0.5 * (1 + std::cos(3 * M_PI / 4))};
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(cosine[k], want[k], 1e-12) << k;
  EXPECT_EQ(ErrorOf([] { ParseLrSchedule("step", 0); }),
            "unknown --lr-schedule 'step'; use constant, cosine or linear");
}

TEST(Training, GpipeRunTrainsAClassifierAndALanguageModelOnFiles) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("big_first.pt") + " -o " + dir.path("c.gpipe") +
                                              " --stages 2 --chunks 2");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  auto run = RunCli(
      "gpipe-run", dir.path("c.gpipe") + " --train --data " + TestModel("data_cls") +
                       " --eval-fraction 0.2 --batch-size 16 --epochs 2 --optimizer adamw --lr 0.01"
                       " --lr-schedule linear --warmup-steps 1 --clip-grad-norm 1 --eval-every 3"
                       " --save " +
                       dir.path("trained.gpipe"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_OUTPUT_HAS(run, "data " + TestModel("data_cls") +
                             ": 50 examples; inputs [100] float32; targets [] int64\n");
  EXPECT_OUTPUT_HAS(
      run,
      "training on 40 examples, evaluating on 10: batch 16, 3 batches per epoch, 6 steps, adamw, "
      "loss cross_entropy\n");
  EXPECT_OUTPUT_HAS(run, "step 6/6  epoch 2  loss ");
  EXPECT_OUTPUT_HAS(run, "eval after step 3: loss ");
  EXPECT_OUTPUT_HAS(run, "eval after step 6: loss ");
  EXPECT_OUTPUT_HAS(run, "accuracy ");
  EXPECT_OUTPUT_HAS(run, "saved " + dir.path("trained.gpipe"));

  compiled = RunCli("gpipe-compile",
                    TestModel("gpt.pt") + " -o " + dir.path("g.gpipe") + " --stages 2 --chunks 2");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  auto lm = RunCli("gpipe-run", dir.path("g.gpipe") + " --train --data " + TestModel("tokens.bin") +
                                    " --seq-len 16 --eval-data " + TestModel("tokens.bin") +
                                    " --batch-size 8 --steps 3 --optimizer adam --lr 0.001");
  ASSERT_EQ(lm.exit_code, 0) << lm.output;
  EXPECT_OUTPUT_HAS(lm, "62 windows of 16 tokens (1000 tokens)");
  EXPECT_OUTPUT_HAS(lm, "step 3/3  epoch 1  loss ");
  EXPECT_OUTPUT_HAS(lm, "eval after step 3: loss ");
  EXPECT_OUTPUT_HAS(lm, "perplexity ");
}

// gpt.pt has dropout: the continuation must also draw the same random
// numbers. 55 training windows in batches of 8 make 7 batches, 4 steps of
// 2 per epoch: the run stops mid-epoch at step 3 and crosses into epoch 2.
TEST(Training, AResumedRunEndsWithTheUninterruptedRunsWeightsBitwise) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("gpt.pt") + " -o " + dir.path("g.gpipe") +
                                              " --stages 2 --chunks 2");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  const std::string data = " --train --data " + TestModel("tokens.bin") +
                           " --seq-len 16 --eval-fraction 0.1"
                           " --batch-size 8 --grad-accum 2 --lr-schedule cosine"
                           " --warmup-steps 2 --clip-grad-norm 1 --eval-every 2 --seed 3";
  const std::string sgd = " --optimizer sgd --momentum 0.9 --nesterov --lr 0.05";
  for (const std::string& optimizer : {std::string(" --optimizer adamw --lr 0.003"), sgd}) {
    SCOPED_TRACE(optimizer);
    const std::string options = data + optimizer;
    auto whole = RunCli("gpipe-run", dir.path("g.gpipe") + options + " --steps 6 --save " +
                                         dir.path("whole.gpipe"));
    ASSERT_EQ(whole.exit_code, 0) << whole.output;
    // Stopped at step 3 of a 6-step cosine schedule: the decay's end is given.
    auto first =
        RunCli("gpipe-run", dir.path("g.gpipe") + options +
                                " --steps 3 --lr-decay-steps 6 --save " + dir.path("half.gpipe"));
    ASSERT_EQ(first.exit_code, 0) << first.output;
    auto rest = RunCli("gpipe-run", dir.path("half.gpipe") + options +
                                        " --resume --steps 6 --save " + dir.path("resumed.gpipe"));
    ASSERT_EQ(rest.exit_code, 0) << rest.output;
    EXPECT_OUTPUT_HAS(rest, "resuming " + dir.path("half.gpipe") + " after step 3\n");
    EXPECT_OUTPUT_HAS(rest, "step 4/6  epoch 1  loss ");
    EXPECT_OUTPUT_HAS(rest, "step 5/6  epoch 2  loss ");
    auto line = [](const std::string& output, const std::string& prefix) {
      size_t at = output.find(prefix);
      return at == std::string::npos ? "missing " + prefix
                                     : output.substr(at, output.find("  grad", at) - at);
    };
    EXPECT_EQ(line(rest.output, "step 6/6"), line(whole.output, "step 6/6"));  // loss and lr
    auto want = Pipeline::load(dir.path("whole.gpipe")).named_parameters();
    auto got = Pipeline::load(dir.path("resumed.gpipe")).named_parameters();
    ASSERT_EQ(want.size(), got.size());
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_TRUE(torch::equal(want[k].second, got[k].second)) << want[k].first;
  }

  // half.gpipe is now the SGD run's.
  const std::string common = data + sgd;
  auto error_of = [&](const std::string& art, const std::string& args) {
    auto r = RunCli("gpipe-run", art + common + " --resume " + args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    return testing::LastLine(r.output);
  };
  EXPECT_EQ(error_of(dir.path("half.gpipe"), "--steps 6 --ignore-index 0"),
            "gpipe-run: error: checkpoint '" + dir.path("half.gpipe") +
                "' was trained with --ignore-index -100, and "
                "this run asks for 0; resume with the options it was trained with (or train afresh "
                "without --resume)\n");
  EXPECT_EQ(error_of(dir.path("half.gpipe"), "--steps 8"),
            "gpipe-run: error: checkpoint '" + dir.path("half.gpipe") +
                "' was trained with --lr-decay-steps 6, and this run asks for 8; resume with the "
                "options it was trained with (or train afresh without --resume)\n");
  EXPECT_EQ(
      error_of(dir.path("half.gpipe"), "--steps 3 --lr-decay-steps 6"),
      "gpipe-run: error: checkpoint '" + dir.path("half.gpipe") +
          "' has done 3 steps already, and this run ends "
          "at step 3; give a larger --steps (it counts the whole run's steps) or more --epochs\n");
  // The same options on other data (the token file's bytes reversed: as many
  // examples, other tokens) are refused before any step.
  {
    std::ifstream in(TestModel("tokens.bin"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::reverse(bytes.begin(), bytes.end());
    std::ofstream(dir.path("other.bin"), std::ios::binary) << bytes;
  }
  std::string other_data = data;
  other_data.replace(other_data.find(TestModel("tokens.bin")), TestModel("tokens.bin").size(),
                     dir.path("other.bin"));
  auto other =
      RunCli("gpipe-run", dir.path("half.gpipe") + other_data + sgd + " --resume --steps 6");
  EXPECT_EQ(other.exit_code, 1) << other.output;
  EXPECT_OUTPUT_HAS(other,
                    "gpipe-run: error: checkpoint '" + dir.path("half.gpipe") +
                        "' was trained on other data (the training examples' fingerprint was ");
  EXPECT_OUTPUT_HAS(other,
                    ": another file, or the same one rewritten); resume with the data it was "
                    "trained on, or train afresh from it without --resume\n");
  EXPECT_EQ(other.output.find("step 4/6"), std::string::npos) << other.output;

  EXPECT_EQ(error_of(dir.path("g.gpipe"), "--steps 6"),
            "gpipe-run: error: '" + dir.path("g.gpipe") +
                "' has no training state to resume (it was written by "
                "gpipe-compile, or by a run without --data); train from it without --resume\n");
}

// Two ranks train on the same file as one process does: the same batches,
// the gradient norm for clipping summed over both ranks' stages.
TEST(Training, TwoProcessesTrainOnDataLikeOneProcess) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("big_first.pt") + " -o " + dir.path("c.gpipe") +
                                              " --stages 2 --chunks 2");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  const std::string options =
      " --train --data " + TestModel("data_cls.pt") +
      " --eval-fraction 0.2 --batch-size 8"
      " --epochs 2 --optimizer sgd --momentum 0.9 --lr 0.05 --clip-grad-norm 0.3";
  auto one =
      RunCli("gpipe-run", dir.path("c.gpipe") + options + " --save " + dir.path("one.gpipe"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = RunCli("gpipe-launch", "--nproc 2 " + dir.path("c.gpipe") + options + " --save " +
                                        dir.path("two.gpipe"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_OUTPUT_HAS(two, "[rank 0] saved " + dir.path("two.gpipe") +
                             " after step 10 (weights only: several processes' "
                             "optimizer states are not saved)");
  auto eval_line = [](const std::string& output, const std::string& prefix) {
    size_t at = output.find(prefix + "eval after step 10: loss ");
    return at == std::string::npos ? std::string("missing") : output.substr(at + prefix.size(), 40);
  };
  EXPECT_EQ(eval_line(two.output, "[rank 0] "),
            eval_line(one.output, ""));  // counted on rank 1, printed by rank 0
  auto want = Pipeline::load(dir.path("one.gpipe")).named_parameters();
  auto got = Pipeline::load(dir.path("two.gpipe")).named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_LE(testing::MaxAbsDiff(want[k].second, got[k].second), 1e-6) << want[k].first;
  }
}

TEST(Training, BadDataOptionsAreOneLineErrors) {
  TempDir dir;
  auto compiled = RunCli("gpipe-compile", TestModel("big_first.pt") + " -o " + dir.path("c.gpipe") +
                                              " --stages 2 --chunks 2");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  const std::string art = dir.path("c.gpipe");
  auto error_of = [&](const std::string& args) {
    auto r = RunCli("gpipe-run", art + " " + args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    return testing::LastLine(r.output);  // after the artifact's summary
  };
  EXPECT_EQ(error_of("--data " + TestModel("data_cls")),
            "gpipe-run: --data needs --train; see gpipe-run --help\n");
  EXPECT_EQ(error_of("--train --data " + TestModel("data_cls") + " --batch-size 1"),
            "gpipe-run: error: --batch-size 1 is smaller than the 2 micro-batches of the pipeline; "
            "use --batch-size "
            "2 or more, or --chunks 1\n");
  EXPECT_EQ(
      error_of("--train --data " + TestModel("data_cls") + " --loss mse"),
      "gpipe-run: error: --loss mse compares the output with targets of its shape, but the model's "
      "output is "
      "[16, 10] and the targets are [16]; check the data's targets or choose another --loss\n");
  EXPECT_EQ(error_of("--train --data " + TestModel("data_cls") + " --eval-fraction 1"),
            "gpipe-run: error: --eval-fraction 1 must be in [0, 1)\n");
  EXPECT_EQ(error_of("--train --data " + dir.path("nowhere")),
            "gpipe-run: error: data path '" + dir.path("nowhere") + "' does not exist\n");
  EXPECT_EQ(error_of("--train --data " + TestModel("data_cls") + " --optimizer lion"),
            "gpipe-run: error: unknown --optimizer 'lion'; use sgd, adam or adamw\n");
  // A decay that cannot happen is refused, not ignored.
  EXPECT_EQ(
      error_of("--train --data " + TestModel("data_cls") + " --lr-decay-steps 4"),
      "gpipe-run: error: --lr-decay-steps 4 ends a decay, and --lr-schedule constant has none; "
      "use --lr-schedule cosine or linear, or drop --lr-decay-steps\n");
  EXPECT_EQ(
      error_of("--train --data " + TestModel("data_cls") +
               " --lr-schedule cosine --warmup-steps 3 --lr-decay-steps 2"),
      "gpipe-run: error: --lr-decay-steps 2 ends the decay before the --warmup-steps 3 warm-up "
      "does; give --lr-decay-steps above 3, or fewer --warmup-steps\n");
  EXPECT_EQ(error_of("--train --sample-input 4x100 --loss cross_entropy"),
            "gpipe-run: error: --loss cross_entropy needs targets from --data; on random inputs "
            "use mse or sum\n");
}

}  // namespace
}  // namespace gpipe
