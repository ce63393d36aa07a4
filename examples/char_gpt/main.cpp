// examples/char_gpt: trains a character-level GPT (attn::nn::GPT) on a text file with AdamW and a
// warmup + cosine schedule, logs and plots the losses, saves a resumable safetensors checkpoint,
// and samples from it; `char_gpt sample` samples from a saved checkpoint. Under `mpirun -np N` it
// trains data-parallel (examples/common/distributed.hpp); rank 0 prints and writes the files.
// Does not tokenize beyond characters nor split a model over machines.
#include <CLI/CLI.hpp>
#include <attn/attn.hpp>
#include <attn/io/checkpoint.hpp>
#include <attn/io/io.hpp>
#include <attn/optim/optim.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../common/attention_variants.hpp"
#include "../common/char_checkpoint.hpp"
#include "../common/distributed.hpp"
#include "../common/plot.hpp"
#include "../common/training.hpp"

namespace {

namespace fs = std::filesystem;
using attn::index_t;
using attn::Tensor;
namespace nn = attn::nn;
namespace io = attn::io;
namespace optim = attn::optim;

using examples::exact;
using examples::format_duration;
using examples::open_checkpoint;
using examples::read_text;
using examples::seconds_since;
using examples::step_seed;
using examples::with_attention;

// ---- options ---------------------------------------------------------------------------------

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

nn::PositionEncoding parse_positions(const std::string& s) {
  if (s == "learned") return nn::PositionEncoding::learned;
  if (s == "sinusoidal") return nn::PositionEncoding::sinusoidal;
  return nn::PositionEncoding::none;
}

// ---- checkpoints -----------------------------------------------------------------------------

// The settings that define a run's trajectory, saved with every checkpoint so that --resume
// continues the same run whatever options it is given (only --stop-at and --threads apply).
void put_run(io::Safetensors& file, const TrainOptions& o, std::int64_t steps_done) {
  auto& m = file.metadata;
  m["train.step"] = std::to_string(steps_done);
  m["train.steps"] = std::to_string(o.steps);
  m["train.warmup"] = std::to_string(o.warmup);
  m["train.batch"] = std::to_string(o.batch);
  m["train.shards"] = std::to_string(o.shards);
  m["train.seed"] = std::to_string(o.seed);
  m["train.eval_every"] = std::to_string(o.eval_every);
  m["train.eval_batches"] = std::to_string(o.eval_batches);
  m["train.lr"] = exact(o.lr);
  m["train.min_lr"] = exact(o.min_lr);
  m["train.weight_decay"] = exact(o.weight_decay);
  m["train.beta2"] = exact(o.beta2);
  m["train.grad_clip"] = exact(o.grad_clip);
  m["train.train_fraction"] = exact(o.train_fraction);
  m["train.data_fraction"] = exact(o.data_fraction);
}

void restore_run(const io::Safetensors& file, TrainOptions& o, const std::string& source) {
  const auto integer = [&](const char* key) { return io::metadata_int(file, key, source); };
  const auto real = [&](const char* key) { return io::metadata_double(file, key, source); };
  o.steps = integer("train.steps");
  o.warmup = integer("train.warmup");
  o.batch = integer("train.batch");
  o.seed = std::stoull(io::metadata_string(file, "train.seed", source));
  o.eval_every = integer("train.eval_every");
  o.eval_batches = integer("train.eval_batches");
  o.lr = real("train.lr");
  o.min_lr = real("train.min_lr");
  o.weight_decay = real("train.weight_decay");
  o.beta2 = real("train.beta2");
  o.grad_clip = real("train.grad_clip");
  o.train_fraction = real("train.train_fraction");
  o.data_fraction = real("train.data_fraction");
  o.shards = file.metadata.contains("train.shards") ? integer("train.shards") : 1;
  ATTN_CHECK(o.steps > 0 && o.batch > 0 && o.eval_every > 0 && o.eval_batches > 0 &&
                 o.warmup >= 0 && o.lr >= 0 && o.min_lr >= 0 && o.train_fraction > 0 &&
                 o.train_fraction <= 1 && o.data_fraction > 0 && o.data_fraction <= 1 &&
                 o.shards >= 1 && o.shards <= o.batch,
             attn::io_error, source, ": the saved training settings are out of range");
}

template <class Model, class Optimizer>
void save_checkpoint(const fs::path& path, Model& model, Optimizer* opt,
                     const attn::data::CharTokenizer& tok, const TrainOptions& o,
                     std::int64_t steps_done) {
  io::Safetensors file;
  io::put_parameters(file, model);
  if (opt != nullptr) io::put_optimizer_state(file, *opt);
  io::put_gpt_config(file, model.config());
  file.metadata["format"] = "attn.char_gpt.v1";
  file.metadata["attention"] = o.attention;
  file.metadata["vocab"] = tok.vocabulary();
  put_run(file, o, steps_done);
  io::save_safetensors(path, file);
}

// ---- training --------------------------------------------------------------------------------

template <class Attn>
int train(const TrainOptions& options, examples::DataParallel& dp) {
  using Model = nn::GPT<Attn>;
  TrainOptions o = options;
  examples::ProgressLine progress;
  attn::set_num_threads(o.threads);

  io::Safetensors resumed;
  const bool resuming = !o.resume.empty();
  if (resuming) {
    resumed = open_checkpoint(o.resume);
    restore_run(resumed, o, o.resume);
    if (options.shards > 0) o.shards = options.shards;  // another split from here on
  }
  o.shards = dp.shards(o.shards, o.batch);
  if (!o.init_from.empty()) resumed = open_checkpoint(o.init_from);
  const std::string& source = resuming ? o.resume : o.init_from;
  const bool from_checkpoint = resuming || !o.init_from.empty();

  // The corpus and its vocabulary (from the checkpoint when continuing one).
  std::string text = read_text(o.data);
  attn::data::CharTokenizer tok;
  if (from_checkpoint) {
    tok = attn::data::CharTokenizer::from_vocabulary(io::metadata_string(resumed, "vocab", source));
  } else {
    std::string all = text;
    for (const std::string& extra : o.vocab_from) all += read_text(extra);
    tok = attn::data::CharTokenizer::from_corpus(all);
  }
  // Training split: the first train_fraction of the text, of which only the first data_fraction
  // is used (the data-size study); validation: always the rest of the text.
  std::vector<std::int32_t> tokens = tok.encode(text);
  const auto n_train = std::size_t(double(tokens.size()) * o.train_fraction);
  const auto keep = std::size_t(double(n_train) * o.data_fraction);
  tokens.erase(tokens.begin() + std::ptrdiff_t(keep), tokens.begin() + std::ptrdiff_t(n_train));
  const auto batches = attn::data::TextBatches::split_at(std::move(tokens), index_t(keep));

  nn::GPTConfig config;
  if (from_checkpoint) {
    config = io::get_gpt_config(resumed, source);
    if (io::metadata_string(resumed, "attention", source) != o.attention)
      throw attn::value_error("char_gpt: " + source + " was trained with --attention " +
                              io::metadata_string(resumed, "attention", source) + ", not " +
                              o.attention);
    if (!resuming) config.dropout = o.dropout;  // a new run from old weights picks its own
  } else {
    config =
        examples::gpt_config({tok.size(), o.block, o.layers, o.heads, o.embd, o.dropout, o.seed});
    config.positions = parse_positions(o.positions);
  }
  const index_t block = config.block_size;
  Model model(config);
  auto params = optim::parameters_of<float>(model);
  optim::AdamConfig ac;
  ac.lr = o.lr;
  ac.beta2 = o.beta2;
  ac.weight_decay = o.weight_decay;
  optim::AdamW<float> opt(params, ac);
  std::int64_t start = 0;
  if (from_checkpoint) io::get_parameters(resumed, model, source);
  dp.broadcast_parameters(model);
  if (resuming) {
    io::get_optimizer_state(resumed, opt, source);
    start = io::metadata_int(resumed, "train.step", source);
  }
  const optim::WarmupCosine schedule{o.lr, o.min_lr, std::min(o.warmup, o.steps), o.steps};

  if (dp.leader()) fs::create_directories(o.out);
  const fs::path out(o.out);
  std::optional<io::CsvLog> log;
  if (dp.leader())
    log.emplace(out / "log.csv",
                std::vector<std::string>{"step", "train_loss", "val_loss", "lr", "grad_norm",
                                         "tokens_per_s", "elapsed_s"},
                resuming);
  const index_t n_params = nn::parameter_count(model);
  index_t n_attn = 0;
  model.for_each_parameter([&](const std::string& name, attn::Parameter<float>& p) {
    if (name.find(".attn.") != std::string::npos) n_attn += p.value.numel();
  });
  if (dp.leader())
    std::printf(
        "char_gpt: %s attention, %lld layers, %lld heads, %lld embd, block %lld, vocab %d\n"
        "          %lld parameters (%lld in attention), %lld training tokens, %d threads\n",
        o.attention.c_str(), (long long)config.layers, (long long)config.heads,
        (long long)config.d_model, (long long)block, tok.size(), (long long)n_params,
        (long long)n_attn, (long long)batches.size(attn::data::Split::train), o.threads);
  if (dp.leader() && dp.ranks() > 1)
    std::printf("          data parallel: %d ranks, %lld shards per step\n", dp.ranks(),
                (long long)o.shards);
  if (dp.leader() && start > 0)
    std::printf("          resuming at step %lld of %lld\n", (long long)start, (long long)o.steps);
  std::fflush(stdout);

  attn::Tape<float> tape;
  Tensor<std::int32_t> x, y;
  const auto evaluate = [&](std::int64_t step) {
    model.set_training(false);
    attn::NoGrad<float> no_grad(tape);
    attn::Rng rng(step_seed(o.seed, 2, step));
    double total = 0;
    for (std::int64_t i = 0; i < o.eval_batches; ++i) {
      tape.clear();
      batches.sample(attn::data::Split::validation, o.batch, block, rng, x, y);
      total += model.loss(tape, x, y).item();
    }
    model.set_training(true);
    return total / double(o.eval_batches);
  };

  std::vector<double> curve_step, curve_train, curve_val;
  double window_loss = 0, grad_norm = 0, val = std::nan("");
  std::int64_t window = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto t_window = t0;
  double tokens_per_s = 0;
  const std::int64_t end = o.stop_at > 0 ? std::min(o.stop_at, o.steps) : o.steps;
  for (std::int64_t step = start; step < end; ++step) {
    attn::Rng rng(step_seed(o.seed, 1, step));
    batches.sample(attn::data::Split::train, o.batch, block, rng, x, y);
    const examples::StepResult r = dp.step(model, tape, opt, params, x, y, -100, schedule(step),
                                           o.grad_clip, rng.split(), 0, o.shards);
    const double loss = r.loss;
    grad_norm = r.grad_norm;
    window_loss += loss;
    ++window;

    const bool last = step + 1 == end;
    const bool eval = (step + 1) % o.eval_every == 0 || last;
    const double elapsed = seconds_since(t0);
    const double done = double(step + 1 - start), left = double(end - step - 1);
    tokens_per_s = done * double(o.batch * block) / elapsed;
    if (eval) {
      val = evaluate(step);
      const double train_loss = window_loss / double(window);
      const double window_tps = double(window) * double(o.batch * block) / seconds_since(t_window);
      if (log)
        log->row(
            {double(step + 1), train_loss, val, schedule(step), grad_norm, window_tps, elapsed});
      curve_step.push_back(double(step + 1));
      curve_train.push_back(train_loss);
      curve_val.push_back(val);
      window_loss = 0, window = 0;
      dp.check_replicas(model);
      if (dp.leader())
        save_checkpoint(out / "checkpoint.safetensors", model, &opt, tok, o, step + 1);
      t_window = std::chrono::steady_clock::now();
    }
    if (dp.leader() && (progress.tty() || eval)) {
      char text[160];
      std::snprintf(text, sizeof text, "step %lld/%lld | loss %.4f | val %.4f | %.0f tok/s",
                    (long long)(step + 1), (long long)o.steps, loss, val, tokens_per_s);
      progress.show(double(step + 1) / double(o.steps), text, left * elapsed / done, eval);
    }
  }
  progress.finish();
  if (!dp.leader()) return 0;

  std::printf("training: %.1f s, %.0f tokens/s, final val loss %.4f\n", seconds_since(t0),
              tokens_per_s, val);
  const fs::path svg = out / "loss.svg", png = out / "loss.png";
  plot::write_svg(svg, "char_gpt: " + o.attention + " attention", "step", "loss",
                  {{"train", "#1f77b4", curve_step, curve_train},
                   {"validation", "#d62728", curve_step, curve_val}});
  const bool have_png =
      !resuming && plot::gnuplot_png(out / "log.csv", png, "char_gpt: " + o.attention,
                                     {{2, "train"}, {3, "validation"}});
  std::printf("plot: %s%s%s\n", svg.c_str(), have_png ? ", " : "", have_png ? png.c_str() : "");
  std::printf("checkpoint: %s\n", (out / "checkpoint.safetensors").c_str());

  if (o.sample_tokens > 0) {
    nn::SampleConfig s;
    s.max_tokens = o.sample_tokens;
    s.temperature = o.temperature;
    s.seed = o.seed;
    const auto prompt = tok.encode(o.prompt);
    const std::string sample = o.prompt + tok.decode(nn::generate(model, prompt, s));
    io::write_file_atomically(out / "sample.txt", sample);
    std::printf("sample (%lld characters, temperature %.2f):\n%s\n", (long long)o.sample_tokens,
                o.temperature, sample.c_str());
  }
  return 0;
}

// ---- sampling from a checkpoint ------------------------------------------------------------

template <class Attn>
int sample(const SampleOptions& o, const io::Safetensors& file) {
  attn::set_num_threads(o.threads);
  nn::GPT<Attn> model(io::get_gpt_config(file, o.checkpoint));
  io::get_parameters(file, model, o.checkpoint);
  const auto tok =
      attn::data::CharTokenizer::from_vocabulary(io::metadata_string(file, "vocab", o.checkpoint));
  nn::SampleConfig s;
  s.max_tokens = o.tokens;
  s.temperature = o.temperature;
  s.top_k = o.top_k;
  s.seed = o.seed;
  s.use_cache = !o.no_cache;
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = nn::generate(model, tok.encode(o.prompt), s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s%s\n", o.prompt.c_str(), tok.decode(ids).c_str());
  std::fprintf(stderr, "%zu tokens in %.2f s (%.0f tokens/s, %s)\n", ids.size(), secs,
               double(ids.size()) / secs, s.use_cache ? "key/value cache" : "no cache");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  examples::DataParallel dp(argc, argv);  // the MPI job, when run under mpirun
  CLI::App app{"char_gpt: train a character-level GPT with attn, or sample from a checkpoint"};
  TrainOptions t;
  std::string choices;
  for (const auto& [name, help] : examples::attention_help())
    choices += "\n  " + name + ": " + help;
  app.add_option("--data", t.data, "training text (UTF-8)")->check(CLI::ExistingFile);
  app.add_option("--vocab-from", t.vocab_from, "more corpora whose characters join the vocabulary")
      ->check(CLI::ExistingFile);
  app.add_option("--attention", t.attention, "attention variant:" + choices)
      ->check(CLI::IsMember(examples::attention_names()));
  app.add_option("--positions", t.positions, "position encoding")
      ->check(CLI::IsMember({"learned", "sinusoidal", "none"}));
  app.add_option("--layers", t.layers, "transformer blocks")->check(CLI::Range(1, 64));
  app.add_option("--heads", t.heads, "attention heads (must divide --embd)")
      ->check(CLI::Range(1, 64));
  app.add_option("--embd", t.embd, "model width")->check(CLI::Range(1, 8192));
  app.add_option("--block", t.block, "context length")->check(CLI::Range(1, 8192));
  app.add_option("--batch", t.batch, "sequences per step")->check(CLI::Range(1, 4096));
  app.add_option("--shards", t.shards,
                 "data-parallel shards of every batch, summed in a fixed order (default: one per "
                 "MPI rank); any rank count that divides it gives the same run")
      ->check(CLI::Range(0, 4096));
  app.add_option("--steps", t.steps, "optimizer steps in total")->check(CLI::Range(1, 100000000));
  app.add_option("--stop-at", t.stop_at,
                 "end this session after this many steps; --resume continues the same run")
      ->check(CLI::Range(0, 100000000));
  app.add_option("--warmup", t.warmup, "linear warmup steps")->check(CLI::Range(0, 100000000));
  app.add_option("--lr", t.lr, "peak learning rate")->check(CLI::Range(0.0, 10.0));
  app.add_option("--min-lr", t.min_lr, "learning rate at the end of the cosine")
      ->check(CLI::Range(0.0, 10.0));
  app.add_option("--weight-decay", t.weight_decay, "AdamW decoupled weight decay (matrices only)")
      ->check(CLI::Range(0.0, 10.0));
  app.add_option("--beta2", t.beta2, "AdamW beta2")->check(CLI::Range(0.0, 0.999999));
  app.add_option("--grad-clip", t.grad_clip, "global gradient-norm clip")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--dropout", t.dropout, "dropout (embeddings, residuals, attention)")
      ->check(CLI::Range(0.0, 0.95));
  app.add_option("--data-fraction", t.data_fraction, "use only this fraction of the training split")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--seed", t.seed, "seed for the weights, batches and dropout");
  app.add_option("--threads", t.threads, "OpenMP threads")->check(CLI::Range(1, 256));
  app.add_option("--eval-every", t.eval_every, "validate, log and checkpoint every N steps")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--eval-batches", t.eval_batches, "validation batches per evaluation")
      ->check(CLI::Range(1, 100000));
  app.add_option("--out", t.out, "output directory (log.csv, loss.svg/png, checkpoint, sample)");
  app.add_option("--resume", t.resume, "continue the run saved in this checkpoint")
      ->check(CLI::ExistingFile);
  app.add_option("--init-from", t.init_from,
                 "start from this checkpoint's weights and vocabulary, with a fresh optimizer")
      ->check(CLI::ExistingFile)
      ->excludes("--resume");
  app.add_option("--sample-tokens", t.sample_tokens, "characters to sample at the end")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--temperature", t.temperature, "sampling temperature")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--prompt", t.prompt, "text the sample continues");

  SampleOptions s;
  CLI::App* sample_cmd = app.add_subcommand("sample", "sample text from a checkpoint");
  sample_cmd->add_option("checkpoint", s.checkpoint, "checkpoint.safetensors")
      ->required()
      ->check(CLI::ExistingFile);
  sample_cmd->add_option("--prompt", s.prompt, "text to continue");
  sample_cmd->add_option("--tokens", s.tokens, "characters to generate")
      ->check(CLI::Range(0, 10000000));
  sample_cmd->add_option("--temperature", s.temperature, "0 = greedy")
      ->check(CLI::Range(0.0, 100.0));
  sample_cmd->add_option("--top-k", s.top_k, "sample among the k most likely (0 = all)")
      ->check(CLI::Range(0, 1000000));
  sample_cmd->add_option("--seed", s.seed, "sampling seed");
  sample_cmd->add_flag("--no-cache", s.no_cache, "recompute the context for every token");
  sample_cmd->add_option("--threads", s.threads, "OpenMP threads")->check(CLI::Range(1, 256));

  CLI11_PARSE(app, argc, argv);
  return dp.finish(examples::exit_status_of([&] {
    if (*sample_cmd) {
      if (!dp.leader()) return 0;
      const io::Safetensors file = open_checkpoint(s.checkpoint);
      return with_attention(io::metadata_string(file, "attention", s.checkpoint),
                            [&]<class Attn>() { return sample<Attn>(s, file); });
    }
    if (t.eval_every > t.steps) t.eval_every = t.steps;
    return with_attention(t.attention, [&]<class Attn>() { return train<Attn>(t, dp); });
  }));
}
