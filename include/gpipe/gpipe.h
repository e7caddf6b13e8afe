#pragma once

// The gpipe-cpp C++ API, one include (find_package(gpipe): gpipe::runtime,
// and gpipe::compiler for gpipe::CompileModel):
//
//   gpipe::Pipeline pipe = gpipe::Pipeline::load("model.gpipe");
//   pipe.train();
//   double loss = pipe.train_step({x}, micro_batch_loss);   // forward + backward
//   std::vector<at::Tensor> out = pipe.forward({x});        // or autograd through it
//   pipe.save("trained.gpipe");
//
// Each type and function is documented where it is declared:
//   runtime/pipeline.h      Pipeline, PipelineOptions (load, forward, train_step,
//                           parameters, train/eval, save)
//   runtime/trainer.h       Trainer: a training run on data, with resume
//   runtime/data_source.h   the data readers (.npy, .pt, token files)
//   runtime/training_loss.h the losses, per micro-batch
//   runtime/model_export.h  the way back to PyTorch (ExportModel, WriteStateDict)
//   compiler/compile.h      CompileModel (link gpipe::compiler)

#include "gpipe/version.h"
#include "runtime/data_source.h"
#include "runtime/model_export.h"
#include "runtime/pipeline.h"
#include "runtime/trainer.h"
#include "runtime/training_loss.h"
