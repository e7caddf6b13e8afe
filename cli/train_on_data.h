#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/program_options.hpp>

#include "runtime/pipeline.h"

namespace gpipe {

class PeerGroup;

// gpipe-run --train --data PATH: the options of training on a data file
// (data, loss, optimizer, schedule, evaluation) and the loop that runs them
// (runtime/trainer.h), printing a line per step and per evaluation.
struct DataTrainingCli {
  std::string data, eval_data, optimizer, lr_schedule,
      token_dtype;  // --loss is gpipe-run's own option
  std::string metrics_out;  // --metrics-out FILE.jsonl
  int64_t batch_size = 32, epochs = 1, seq_len = 0, grad_accum = 1, warmup_steps = 0,
          eval_every = 0;
  int64_t log_every = 1;
  int64_t lr_decay_steps = 0;  // --lr-decay-steps, when given
  int64_t ignore_index = -100;
  double eval_fraction = 0, momentum = 0, beta1 = 0.9, beta2 = 0.999, weight_decay = -1,
         clip_grad_norm = 0;
};

void AddDataTrainingOptions(boost::program_options::options_description& options,
                            DataTrainingCli& cli);

// Where a run's checkpoints go and where it resumes from.
struct CheckpointCli {
  std::string save;   // --save OUT: at the end (and every `every` steps), atomically
  int64_t every = 0;  // --checkpoint-every K
  std::optional<std::string> resume_from;  // --resume: the artifact loaded, with its training state
};

// Where a run on data ended: its last step, counted over the whole run (a
// resumed run goes on counting), and the step the whole run ends at.
struct DataRunEnd {
  int64_t last_step = 0;
  int64_t total_steps = 0;
};

// Trains `pipe`; `steps` is --steps when given (the whole run's steps).
// `stop(step)` runs after every step and returns true to stop (Ctrl-C).
DataRunEnd TrainOnData(Pipeline& pipe, const DataTrainingCli& cli,
                       const boost::program_options::variables_map& vm, double lr,
                       std::optional<int64_t> steps, uint64_t seed,
                       std::shared_ptr<PeerGroup> peers, bool verbose,
                       const CheckpointCli& checkpoints, const std::function<bool(int64_t)>& stop);

}  // namespace gpipe
