// examples/char_gpt/char_gpt.hpp: what char_gpt's command line (main.cpp) hands to its training
// and sampling code (train.cpp): the options, and the job that runs them inside the data-parallel
// world. Two files so that each compiles alone (the command line without the model, the model
// without CLI11) and a two-core build compiles them side by side.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace examples {
class DataParallel;
}

namespace char_gpt {

using index_t = std::int64_t;

struct TrainOptions {
  std::string data = "data/tinyshakespeare.txt";
  std::vector<std::string> vocab_from;  // extra corpora whose characters join the vocabulary
  std::string attention = "standard";
  std::string positions = "learned";
  index_t layers = 4, heads = 4, embd = 128, block = 64, batch = 32;
  index_t shards = 0;  // data-parallel shards of every batch (0: one per rank)
  std::int64_t steps = 600, warmup = 50;
  std::int64_t stop_at = 0;  // > 0: end this session after that many steps (resume later)
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, beta2 = 0.99, grad_clip = 1.0;
  double dropout = 0.0, train_fraction = 0.9, data_fraction = 1.0;
  std::uint64_t seed = 1;
  int threads = 2;
  std::int64_t eval_every = 100, eval_batches = 8;
  std::string out = "runs/char_gpt";
  bool overwrite = false;
  std::string resume;
  std::string init_from;  // start from a checkpoint's weights with a fresh optimizer (transfer)
  index_t sample_tokens = 500;
  double temperature = 0.8;
  std::string prompt = "\n";
};

struct SampleOptions {
  std::string checkpoint;
  std::string prompt = "\n";
  index_t tokens = 500;
  double temperature = 0.8;
  index_t top_k = 0;
  std::uint64_t seed = 1;
  bool no_cache = false;
  int threads = 2;
};

// The program's work once its command line is read (train.cpp). Constructed first thing in main:
// joins the MPI job when the program is built with MPI and runs under mpirun.
class Job {
 public:
  Job(int& argc, char**& argv);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Trains (or resumes) a run; `given` holds the long names ("--out") of the options given on the
  // command line, which a resumed run compares with its saved settings.
  int train(const TrainOptions& options, const std::set<std::string>& given);
  // Samples from a checkpoint (on rank 0; the other ranks return 0).
  int sample(const SampleOptions& options);
  // main's exit status, after ending the MPI job (see examples::DataParallel::finish).
  int finish(int status);

 private:
  std::unique_ptr<examples::DataParallel> dp_;
};

}  // namespace char_gpt
