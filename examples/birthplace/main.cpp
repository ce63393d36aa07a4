// examples/birthplace: the XCS224N birth-place experiment with attn: pretrain a GPT on Wikipedia
// text with span corruption, finetune it on "Where was X born?" pairs, evaluate exact-match
// accuracy with greedy decoding, and the always-"London" baseline; vanilla, synthesizer or
// negative-squared-Euclidean attention; pretrain and finetune train data-parallel under `mpirun -np
// N` (attn/dist/data_parallel.hpp). Does not use a GPU nor tune anything by itself.
#include <CLI/CLI.hpp>
#include <attn/attn.hpp>
#include <attn/core/float_env.hpp>
#include <attn/data/data.hpp>
#include <attn/data/question_answer.hpp>
#include <attn/io/checkpoint.hpp>
#include <attn/io/io.hpp>
#include <attn/optim/optim.hpp>
#include <attn/train/memory.hpp>
#include <attn/train/plot.hpp>
#include <attn/train/progress.hpp>
#include <attn/train/settings.hpp>
#include <attn/train/trainer.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../common/attention_variants.hpp"
#include "../common/char_checkpoint.hpp"
#include "../common/cli.hpp"
#include "../common/distributed.hpp"
#include "../common/model_config.hpp"

namespace {

namespace plot = attn::train::plot;

namespace fs = std::filesystem;
using attn::index_t;
using attn::Tensor;
namespace nn = attn::nn;
namespace io = attn::io;
namespace optim = attn::optim;
namespace data = attn::data;
using attn::train::format_duration;
using attn::train::seconds_since;
using attn::train::step_seed;

constexpr const char* checkpoint_format = "attn.birthplace.v1";

// ---- the model -----------------------------------------------------------------------------

// Every --variant (a name of the examples' attention registry; "vanilla", the problem set's, is
// "standard") is one model type, nn::GPT<AnyCausal>: training and evaluation compile once, the
// attention modules once each.
using Model = nn::GPT<examples::AnyCausal>;

// ---- options ---------------------------------------------------------------------------------

enum class Stage { pretrain, finetune };
const char* stage_name(Stage s) {
  return s == Stage::pretrain ? "pretrain" : "finetune";
}

struct Options {
  // The model of a new run (a checkpoint brings its own).
  std::string variant = "vanilla";
  index_t layers = 4, heads = 8, embd = 256, block = 128;
  double dropout = 0.1;
  // Data.
  std::string pretrain_corpus = "data/wiki.txt";
  std::string vocabulary_corpus;  // the text whose characters are the vocabulary; default: pretrain
  std::string finetune_corpus = "data/birth_places_train.tsv";
  std::string eval_corpus = "data/birth_dev.tsv";
  std::string outputs_path;
  // Files.
  std::string reading_params, writing_params, resume;
  // The run, with the problem set's hyper-parameters for pretraining (stage_options: finetuning).
  double epochs = 650, budget_minutes = 0, lr = 6e-3;
  std::string schedule = "mingpt";
  // attn's choices where the problem set's code (minGPT of 2020) does otherwise; "mingpt" and
  // "sequential" are that code's (docs/experiments/birthplace.md lists each).
  std::string init = "gpt2", decay_rule = "matrices", order = "shuffled";
  index_t batch = 128, micro_batch = 0, shards = 0;
  std::int64_t warmup_tokens = 512 * 20;
  double grad_clip = 1.0, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95;
  std::uint64_t seed = 1;
  int threads = 2;
  std::string denormals = "flush";
  std::int64_t stop_at = 0, save_every = 0;  // save_every 0: every epoch
  bool overwrite = false;
};

// The problem set's epochs: pretraining 650, finetuning 75 from scratch or 10 from pretrained
// weights. minGPT's cosine is laid out for them (and scales with other --epochs).
double default_epochs(Stage stage, bool pretrained) {
  return stage == Stage::pretrain ? 650 : pretrained ? 10 : 75;
}

// A stage's options at the problem set's values (its run.py: pretrain lr 6e-3, batch 128;
// finetune lr 6e-4, batch 256).
Options stage_options(Stage stage) {
  Options o;
  if (stage == Stage::finetune) o.epochs = default_epochs(stage, false), o.batch = 256, o.lr = 6e-4;
  return o;
}

// ---- the settings tables: each option declared once ------------------------------------------

using attn::train::may_change;
using attn::train::not_saved;
using attn::train::Settings;

// The model of a new run. A checkpoint brings its own, saved in its config.* (and its variant),
// so these rows are not saved with the run's settings: a run from a checkpoint compares them with
// it (Settings::check_given).
void declare_model(Settings& s, Options& o) {
  s.text("variant", o.variant, "attention variant:" + examples::attention_choices_help(true))
      .choices(examples::attention_names(true))
      .on_resume(not_saved);
  s.integer("layers", o.layers, "transformer blocks (new models)")
      .range(1, 64)
      .on_resume(not_saved);
  s.integer("heads", o.heads, "attention heads; d_h = embd / heads (new models)")
      .range(1, 256)
      .on_resume(not_saved);
  s.integer("embd", o.embd, "model width (new models)").range(1, 8192).on_resume(not_saved);
  s.integer("block", o.block, "context length (new models)").range(8, 8192).on_resume(not_saved);
  s.real("dropout", o.dropout, "dropout of embeddings, residuals, attention")
      .range(0, 0.95)
      .on_resume(not_saved);
  s.text("init", o.init,
         "gpt2: weights N(0, 0.02^2), the residual projections 0.02/sqrt(2 layers), the position "
         "table like the token table; mingpt: the problem set's code, every weight N(0, 0.02^2), "
         "the position table zero and the synthesizer's w2 U(-0.001, 0.001) (new models)")
      .choices({"gpt2", "mingpt"})
      .on_resume(not_saved);
}

void declare_vocabulary(Settings& s, Options& o) {
  s.text("vocabulary-corpus", o.vocabulary_corpus,
         "text whose characters are a new model's vocabulary (default: the pretraining corpus; a "
         "subset of the people takes the full wiki.txt)")
      .on_resume(not_saved);
}

// Every subcommand's: how float arithmetic treats subnormal numbers (attn/core/float_env.hpp).
void declare_denormals(Settings& s, Options& o) {
  s.text("denormals", o.denormals,
         "flush: subnormal floats become zero (2.3 times faster pretraining once the model is "
         "trained, on an Intel Xeon); keep: IEEE gradual underflow")
      .choices({"flush", "keep"})
      .on_resume(attn::train::may_change);
}

// pretrain's and finetune's settings. The run's rows are saved in every checkpoint (train.<name>)
// and kept by --resume, which names both values of any option that contradicts them.
void declare_stage(Settings& s, Options& o, Stage stage) {
  declare_model(s, o);
  s.text("pretrain-corpus", o.pretrain_corpus,
         "pretraining text, one document per line (defines the vocabulary)")
      .on_resume(not_saved);
  declare_vocabulary(s, o);
  if (stage == Stage::finetune) {
    s.text("finetune-corpus", o.finetune_corpus, "TSV: question<TAB>place").on_resume(not_saved);
    s.text("reading-params", o.reading_params, "pretrained checkpoint to start from")
        .on_resume(not_saved);
  }
  s.text("writing-params", o.writing_params,
         "checkpoint to write (its log goes to <file>.log.csv, its plot to <file>.loss.svg); "
         "refused where a run's files exist, unless --overwrite")
      .on_resume(not_saved);
  s.flag("overwrite", o.overwrite,
         "start a new run even where --writing-params (or its log) exists, replacing it")
      .on_resume(not_saved);
  s.text("resume", o.resume,
         "continue the interrupted run saved in this checkpoint, with its settings")
      .on_resume(not_saved);
  s.real("epochs", o.epochs,
         std::string("passes over the data (the problem set's") +
             (stage == Stage::finetune ? "; 10 with --reading-params" : "") +
             "); the cosine schedule scales with it")
      .range(0, 1e6, true);
  s.real("budget-minutes", o.budget_minutes,
         "choose --epochs so that training takes about this long (timed on 3 steps; 0: off)")
      .range(0, 1e6)
      .on_resume(not_saved);
  s.integer("batch", o.batch, "sequences per step").range(1, 65536);
  s.integer("micro-batch", o.micro_batch,
            "run each step's sequences this many at a time (gradient accumulation: the same step "
            "in less memory; 0 = all at once)")
      .range(0, 65536);
  s.integer("shards", o.shards,
            "data-parallel shards of every batch, summed in a fixed order (0: one per MPI rank); "
            "any rank count that divides it gives the same run")
      .range(0, 65536)
      .on_resume(may_change);
  s.real("lr", o.lr, "peak learning rate").range(0, 10, true);
  s.text("schedule", o.schedule,
         "mingpt: the problem set's cosine (it ends at 200 epochs of the pretraining corpus, "
         "scaled with --epochs, and is not clamped, so a run longer than that cycles back up); "
         "single: one cosine decay over exactly this run")
      .choices({"mingpt", "single"});
  s.integer("warmup-tokens", o.warmup_tokens, "linear warmup over this many tokens")
      .range(0, 0x1p50);
  s.real("weight-decay", o.weight_decay, "AdamW decoupled weight decay").range(0, 10);
  s.text("decay-rule", o.decay_rule,
         "which parameters decay: matrices (nanoGPT's rule: not biases or LayerNorm gains) or "
         "mingpt (the problem set's code: every parameter but the biases)")
      .choices({"matrices", "mingpt"});
  s.text("order", o.order,
         "shuffled: a new seeded order of the examples every epoch; sequential: the data's own "
         "order every epoch (the problem set's code)")
      .choices({"shuffled", "sequential"});
  s.real("beta1", o.beta1, "AdamW beta1").range(0, 0.999999);
  s.real("beta2", o.beta2, "AdamW beta2").range(0, 0.999999);
  s.real("grad-clip", o.grad_clip, "global gradient-norm clip").range(0, 1e9, true);
  s.unsigned_integer("seed", o.seed,
                     "seed of the weights, the example order and corruption, dropout");
  s.integer("threads", o.threads, "OpenMP threads").range(1, 256).on_resume(not_saved);
  declare_denormals(s, o);
  s.integer("save-every", o.save_every, "steps between checkpoints (0: every epoch)")
      .range(0, 0x1p40);
  s.integer("stop-at", o.stop_at,
            "end this session after this many steps; --resume continues the same run")
      .range(0, 0x1p40)
      .on_resume(not_saved);
  // Checkpoints written before a setting existed keep what it was then.
  s.fallback_when_missing("schedule");
  s.fallback_when_missing("denormals", "keep");
  s.fallback_when_missing("shards", "1");  // before data parallelism, one shard
  s.fallback_when_missing("decay-rule", "matrices");
  s.fallback_when_missing("order", "shuffled");
}

// evaluate's and london's: where the questions and the predictions are.
void declare_questions(Settings& s, Options& o) {
  s.text("eval-corpus", o.eval_corpus, "TSV: question<TAB>place");
  s.text("outputs-path", o.outputs_path, "write the predictions here, one per line");
}

// Where a run's steps fall, from its settled options (`o`: the defaults, the budget, the saved
// settings of a resumed run all in place) and what its data came to; examples and final_tokens
// are saved with the table's settings, so that --resume continues the same run.
struct Run {
  const Options& o;
  Stage stage = Stage::pretrain;
  index_t examples = 0, block = 0;
  std::int64_t final_tokens = 0;
  // Tokens minGPT's schedule counts per example: every target position, PAD included. The
  // problem set's datasets pad an example to `block` characters and train on its first block − 1
  // as input and its last block − 1 as target, so its trainer counts block − 1 a row; attn's rows
  // are `block` long (the last target always PAD) and count block − 1 too, so that the cosine
  // keeps the course's phase. A checkpoint saved without train.tokens_per_example counted
  // `block` and resumes so.
  index_t tokens_per_example = 0;

  std::int64_t steps_per_epoch() const { return (examples + o.batch - 1) / o.batch; }
  std::int64_t total_steps() const {
    return std::max<std::int64_t>(1, std::llround(o.epochs * double(steps_per_epoch())));
  }
  // Rows of step s: a batch of the epoch's order; the last batch of an epoch may be short.
  index_t rows(std::int64_t step) const {
    const index_t first = index_t(step % steps_per_epoch()) * o.batch;
    return std::min(o.batch, examples - first);
  }
  // Tokens (rows × tokens_per_example, as minGPT counts them) of the steps before `step`.
  std::int64_t tokens_before(std::int64_t step) const {
    const std::int64_t epoch = step / steps_per_epoch(), in = step % steps_per_epoch();
    return (epoch * examples + std::min<std::int64_t>(in * o.batch, examples)) * tokens_per_example;
  }
};

io::Safetensors open_checkpoint(const std::string& path) {
  return examples::open_checkpoint(path, checkpoint_format, "birthplace");
}

// What a checkpoint saves: the model, the optimizer, the table's run settings (train.epochs,
// train.lr, ...) and the run's point, then the stage and what the data and the schedule came to.
template <class Model, class Optimizer>
void save_checkpoint(const fs::path& path, Model& model, Optimizer& opt,
                     const data::CharTokenizer& tok, const std::string& variant,
                     const Settings& settings, const Run& run, const attn::train::RunPoint& point) {
  io::Safetensors file;
  io::put_parameters(file, model);
  io::put_optimizer_state(file, opt);
  io::put_gpt_config(file, model.config());
  auto& m = file.metadata;
  m["format"] = checkpoint_format;
  m["variant"] = variant;
  m["vocab"] = tok.vocabulary();
  attn::train::save_run_point(m, settings, point);
  m["train.stage"] = stage_name(run.stage);
  m["train.examples"] = std::to_string(run.examples);
  m["train.final_tokens"] = std::to_string(run.final_tokens);
  m["train.tokens_per_example"] = std::to_string(run.tokens_per_example);
  io::save_safetensors(path, file);
}

// The vocabulary of a new model: the characters of --vocabulary-corpus (default: of the
// pretraining corpus, as the problem set does) and the masking characters. A subset of the
// problem set's people trains with the full corpus's vocabulary, so that its questions and
// answers can be encoded and its model is the full set's, table for table.
data::CharTokenizer new_vocabulary(const Options& o, const std::string& pretrain_text) {
  if (o.vocabulary_corpus.empty())
    return examples::about(o.pretrain_corpus,
                           [&] { return data::masked_vocabulary(pretrain_text); });
  const data::CharTokenizer tok = examples::about(o.vocabulary_corpus, [&] {
    return data::masked_vocabulary(examples::read_corpus(o.vocabulary_corpus));
  });
  examples::about(o.pretrain_corpus, [&] {  // every pretraining character must be in it
    tok.encode(pretrain_text);
    return 0;
  });
  return tok;
}

// The examples a stage trains on: span corruption of the pretraining documents, or QA pairs.
// batch(seed, rows, x, y) fills x, y [rows.size(), T <= block] (the all-PAD tail trimmed); the
// corruption draws come from the step's seed, so a step's batch depends only on (seed, step).
struct StageData {
  std::optional<data::SpanCorruption> corruption;
  std::optional<data::QADataset> qa;

  index_t size() const { return corruption ? corruption->size() : qa->size(); }
  void batch(std::uint64_t step_seed_value, std::span<const index_t> rows, Tensor<std::int32_t>& x,
             Tensor<std::int32_t>& y) const {
    if (corruption) {
      attn::Rng rng(step_seed_value);
      corruption->batch(rows, rng, x, y);
    } else {
      qa->batch(rows, x, y);
    }
    data::trim_padding(x, y);  // the same loss and gradients, without the all-PAD tail
  }
};

// ---- training (pretrain and finetune) --------------------------------------------------------

// Trains a stage: `o` holds the options, `settings` is declare_stage's table over it (the options
// given marked given), `source_file` the checkpoint of --resume or --reading-params (empty for a
// new model). A resumed run takes its saved settings into `o`; a new one settles the defaults
// there, so that the checkpoint saves what the run is.
int train(Options& o, Settings& settings, Stage stage, const io::Safetensors& source_file,
          attn::dist::DataParallel& dp) {
  const attn::train::StopRequest stop;
  attn::set_num_threads(o.threads);
  attn::set_denormals(attn::parse_denormals(o.denormals));
  const auto t_start = std::chrono::steady_clock::now();
  const std::string source = !o.resume.empty() ? o.resume : o.reading_params;
  const bool resuming = !o.resume.empty();

  // ---- where the run goes: checked before anything is read or trained
  const fs::path out = resuming ? fs::path(o.resume) : fs::path(o.writing_params);
  ATTN_CHECK(!resuming || o.writing_params.empty() || attn::train::same_path(o.writing_params, out),
             attn::value_error, "--writing-params ", o.writing_params, " conflicts with --resume ",
             o.resume, ": a resumed run goes on writing its own checkpoint");
  ATTN_CHECK(o.reading_params.empty() || !attn::train::same_path(o.reading_params, out),
             attn::value_error, "--writing-params ", out.string(),
             " is the checkpoint --reading-params reads: finetuning would overwrite the ",
             "pretrained model; write to another file");
  const fs::path log_path = out.string() + ".log.csv", svg = out.string() + ".loss.svg";
  const std::string continue_with =
      std::string("birthplace ") + stage_name(stage) + " --resume " + out.string();
  const std::vector<std::string> columns{"step",      "epoch",        "loss",      "lr",
                                         "grad_norm", "tokens_per_s", "elapsed_s", "cpu_s"};
  // The run's files, owned by rank 0 alone (the other ranks write none; the path may not exist
  // on their machine): checked, locked and guarded before anything is read or trained.
  attn::train::Trainer trainer(
      {out, log_path, columns, {svg}, out.string() + ".lock"},
      {.program = "birthplace",
       .option = "--writing-params",
       .where = out,
       .resuming = resuming,
       .overwrite = o.overwrite,
       .how_to_continue = "continue that run with `" + continue_with + "`",
       .inputs = {{o.pretrain_corpus, "--pretrain-corpus"},
                  {o.vocabulary_corpus, "--vocabulary-corpus"},
                  {stage == Stage::finetune ? o.finetune_corpus : std::string(),
                   "--finetune-corpus"}}},
      stop, dp.leader());

  ATTN_CHECK(source.empty() || o.vocabulary_corpus.empty(), attn::value_error,
             "birthplace: --vocabulary-corpus is for new models; ", source,
             " brings its own vocabulary");
  const std::string corpus = examples::read_corpus(o.pretrain_corpus);
  const data::CharTokenizer tok =
      source.empty() ? new_vocabulary(o, corpus) : examples::about(source, [&] {
        return data::CharTokenizer::from_vocabulary(
            io::metadata_string(source_file, "vocab", source));
      });
  std::string variant = o.variant;
  std::optional<nn::GPTConfig> saved_model;
  if (!source.empty()) {
    saved_model = io::get_gpt_config(source_file, source);
    variant = io::metadata_string(source_file, "variant", source);
    ATTN_CHECK(!settings.given("variant") ||
                   examples::attention_index(variant) == examples::attention_index(o.variant),
               attn::value_error, "birthplace: ", source, " holds a ", variant, " model, not ",
               o.variant);
  }
  const auto init_name = [](nn::InitScheme i) {
    return i == nn::InitScheme::mingpt ? "mingpt" : i == nn::InitScheme::normal ? "gpt2" : "other";
  };
  nn::GPTConfig config = examples::run_config(
      saved_model, source, resuming, settings,
      {tok.size(), o.block, o.layers, o.heads, o.embd, o.dropout, o.seed},
      saved_model ? std::map<std::string, std::string>{{"init", init_name(saved_model->init)}}
                  : std::map<std::string, std::string>{});
  if (!saved_model)
    config.init = o.init == "mingpt" ? nn::InitScheme::mingpt : nn::InitScheme::normal;
  const index_t block = config.block_size;

  StageData examples_of;
  if (stage == Stage::pretrain)
    examples::about(o.pretrain_corpus, [&] { examples_of.corruption.emplace(tok, corpus, block); });
  else
    examples_of.qa.emplace(tok, examples::read_corpus(o.finetune_corpus), block, o.finetune_corpus);

  const std::string smaller = "use a smaller --batch or model, or --micro-batch";
  attn::train::check_memory(attn::train::parameters_estimate(config), "birthplace", smaller);
  Model model(config, examples::attention_factory(variant));
  if (!source.empty()) io::get_parameters(source_file, model, source);
  auto params = optim::parameters_of<float>(model);
  if (o.decay_rule == "mingpt")
    for (auto& p : params) p.decay = optim::mingpt_decay(p.name, *p.param);

  // What one step keeps in memory, measured on this model, for the run's sequences per pass.
  std::string memory;
  const auto check_run_memory = [&] {
    const index_t rows = o.micro_batch > 0 ? std::min(o.micro_batch, o.batch) : o.batch;
    memory = attn::train::check_memory(attn::train::training_memory(model, block, rows),
                                       "birthplace", smaller);
  };

  // The run's settings: the saved ones when resuming; otherwise the options, settled. Then the
  // session: from the checkpoint's step, or from 0.
  Run run{o, stage, examples_of.size(), block};
  run.tokens_per_example = block - 1;
  const auto start_session = [&](const attn::train::RunPoint& from) -> attn::train::Session& {
    return trainer.start_session({.from = from,
                                  .total = run.total_steps(),
                                  .stop_at = o.stop_at,
                                  .source = resuming ? source : std::string(),
                                  .checkpoint = out.string(),
                                  .continue_with = continue_with});
  };
  if (resuming) {
    ATTN_CHECK(!settings.given("budget-minutes"), attn::value_error,
               "--budget-minutes conflicts with --resume ", source,
               ": a resumed run keeps its epochs");
    settings.resume_from(source_file.metadata, source,
                         "--stop-at, --threads and --shards may change");
    const std::string& saved_stage = io::metadata_string(source_file, "train.stage", source);
    ATTN_CHECK(saved_stage == "pretrain" || saved_stage == "finetune", attn::io_error, source,
               ": metadata train.stage = '", saved_stage, "' is neither pretrain nor finetune");
    ATTN_CHECK(saved_stage == stage_name(stage), attn::value_error, "birthplace: ", source,
               " is a ", saved_stage, " run; resume it with `birthplace ", saved_stage,
               " --resume`");
    const index_t saved_examples = io::metadata_int(source_file, "train.examples", source);
    ATTN_CHECK(saved_examples == examples_of.size(), attn::value_error, "birthplace: ", source,
               " was trained on ", saved_examples, " examples, the data now has ",
               examples_of.size());
    o.shards = dp.shards(o.shards, o.batch);  // another split from here on, when given
    run.final_tokens = io::metadata_int(source_file, "train.final_tokens", source);
    run.tokens_per_example =
        source_file.metadata.contains("train.tokens_per_example")
            ? index_t(io::metadata_int(source_file, "train.tokens_per_example", source))
            : block;
    // Written so that a NaN read from a file fails every check.
    ATTN_CHECK(o.save_every > 0 && run.final_tokens >= o.warmup_tokens &&
                   run.tokens_per_example >= 1 && run.tokens_per_example <= block,
               attn::io_error, source, ": the saved training settings are out of range");
    const attn::train::Session& session =
        start_session(attn::train::read_run_point(source_file.metadata, source));
    if (session.finished()) {
      if (dp.leader())
        std::printf(
            "%s\n",
            session.finished_line("birthplace", std::string(stage_name(stage)) + " run").c_str());
      return 0;
    }
    check_run_memory();
    dp.start();  // every rank's checks passed (or the first that failed reports, once)
  } else {
    const bool pretrained = stage == Stage::finetune && !o.reading_params.empty();
    if (pretrained && !settings.given("epochs")) o.epochs = default_epochs(stage, pretrained);
    o.shards = dp.shards(o.shards, o.batch);
    if (o.save_every == 0) o.save_every = run.steps_per_epoch();
    check_run_memory();
    dp.start();  // every rank's checks passed (or the first that failed reports, once)
    if (o.budget_minutes > 0) {
      // Time a few steps of a throwaway copy of the run, then fit the epochs to the budget; the
      // run itself is then exactly the run with that --epochs.
      Model probe(config, examples::attention_factory(variant));
      auto probe_params = optim::parameters_of<float>(probe);
      optim::AdamW<float> probe_opt(probe_params, optim::AdamConfig{});
      attn::Tape<float> tape;
      Tensor<std::int32_t> x, y;
      std::vector<index_t> rows(std::size_t(std::min(o.batch, run.examples)));
      std::iota(rows.begin(), rows.end(), index_t{0});
      double best = 1e300;
      for (int i = 0; i < 3; ++i) {
        const auto t = std::chrono::steady_clock::now();
        examples_of.batch(std::uint64_t(i), rows, x, y);
        dp.step(probe, tape, probe_opt, probe_params, x, y, data::pad_id, 0.0, 1.0,
                std::uint64_t(i), o.micro_batch, o.shards);
        if (i > 0) best = std::min(best, seconds_since(t));
      }
      const double steps = o.budget_minutes * 60 / best;
      o.epochs = std::floor(steps / double(run.steps_per_epoch()) * 100) / 100;  // 2 decimals
      o.epochs = std::max(o.epochs, 1.0 / double(run.steps_per_epoch()));        // >= 1 step
      dp.broadcast(o.epochs);  // rank 0's timing decides, so that every rank runs the same run
      if (dp.leader())
        std::printf("budget %.1f min: %.2f s per step of %lld sequences -> %.2f epochs\n",
                    o.budget_minutes, best, (long long)o.batch, o.epochs);
    }
    // minGPT's cosine ends at final_tokens = 200 · len(pretraining data) · block for the default
    // epochs; it scales with --epochs so that a shorter run keeps the schedule's shape.
    const double pretrain_documents = stage == Stage::pretrain
                                          ? double(run.examples)
                                          : double(data::SpanCorruption(tok, corpus, block).size());
    run.final_tokens = std::llround(200.0 * pretrain_documents * double(block) * o.epochs /
                                    default_epochs(stage, pretrained));
    // --schedule single: one decay, ending where the run ends (the floor from 80 % of it on).
    if (o.schedule == "single") run.final_tokens = run.tokens_before(run.total_steps());
    run.final_tokens = std::max(run.final_tokens, o.warmup_tokens);
    start_session({});
  }
  const attn::train::Session& session = trainer.session();
  dp.broadcast_parameters(model);
  const std::int64_t total = run.total_steps(), spe = run.steps_per_epoch();
  const optim::MinGptTokenSchedule schedule{o.lr, o.warmup_tokens, run.final_tokens};

  optim::AdamConfig ac;
  ac.lr = o.lr;
  ac.beta1 = o.beta1;
  ac.beta2 = o.beta2;
  ac.weight_decay = o.weight_decay;
  optim::AdamW<float> opt(params, ac);
  if (resuming) io::get_optimizer_state(source_file, opt, source);

  if (dp.leader())
    std::printf(
        "birthplace %s: %s attention, %lld layers, %lld heads (d_h %lld), %lld embd, block %lld, "
        "vocab %d, %lld parameters\n"
        "  %lld examples, batch %lld: %lld steps per epoch, %.2f epochs = %lld steps; lr %.3g, "
        "minGPT cosine over %lld tokens (warmup %lld); %d threads; memory %s\n",
        stage_name(stage), variant.c_str(), (long long)config.layers, (long long)config.heads,
        (long long)(config.d_model / config.heads), (long long)config.d_model, (long long)block,
        tok.size(), (long long)nn::parameter_count(model), (long long)run.examples,
        (long long)o.batch, (long long)spe, o.epochs, (long long)total, o.lr,
        (long long)run.final_tokens, (long long)o.warmup_tokens, o.threads, memory.c_str());
  if (dp.leader() && dp.ranks() > 1)
    std::printf("  data parallel: %d ranks, %lld shards per step\n", dp.ranks(),
                (long long)o.shards);
  if (dp.leader() && !o.reading_params.empty())
    std::printf("  weights from %s\n", o.reading_params.c_str());
  if (dp.leader() && session.start() > 0)
    std::printf("  resuming at step %lld of %lld\n", (long long)session.start(), (long long)total);
  std::fflush(stdout);

  attn::Tape<float> tape;
  Tensor<std::int32_t> x, y;
  std::vector<index_t> order;
  std::int64_t order_epoch = -1;
  double loss = std::nan(""), epoch_loss = 0, lr = 0;
  std::int64_t epoch_steps = 0;
  // A step: the epoch's seeded order of the examples (each epoch visits every one once), the
  // step's rows of it, span corruption or the question's padding drawn from (seed, step), dropout
  // from (seed, step), minGPT's learning rate for the step (step 0 included).
  const auto step = [&](std::int64_t s) {
    const std::int64_t epoch = s / spe;
    if (epoch != order_epoch) {
      if (o.order == "sequential") {
        order.resize(std::size_t(run.examples));
        std::iota(order.begin(), order.end(), index_t{0});
      } else {
        attn::Rng r(step_seed(o.seed, 3, epoch));
        order = data::shuffled_indices(run.examples, r);
      }
      order_epoch = epoch;
    }
    const index_t first = index_t(s % spe) * o.batch;
    const std::span<const index_t> rows(order.data() + first, std::size_t(run.rows(s)));
    examples_of.batch(step_seed(o.seed, 1, s), rows, x, y);
    lr = schedule.for_step(s, run.tokens_before(s));
    const optim::StepResult r =
        dp.step(model, tape, opt, params, x, y, data::pad_id, lr, o.grad_clip,
                step_seed(o.seed, 2, s), o.micro_batch, o.shards);
    loss = r.loss;
    epoch_loss += r.loss, ++epoch_steps;
    return r;
  };
  // After it: the checkpoint every --save-every steps and at the session's last (its end,
  // --stop-at or Ctrl-C on any rank), then the step's log row (a resume cuts the log back to the
  // checkpoint's step anyway) and the progress line, kept at each epoch's end.
  const attn::train::LoopEnd ran = trainer.run(
      double(o.batch * block), step,
      {.save_every = o.save_every,
       .before_save = [&](const attn::train::StepReport&) { dp.check_replicas(model); },
       .save =
           [&](const attn::train::RunPoint& point) {
             save_checkpoint(out, model, opt, tok, variant, settings, run, point);
           },
       .log = [&](const attn::train::StepReport& r, const attn::train::RunPoint& now,
                  bool) -> std::optional<std::vector<double>> {
         return std::vector<double>{double(r.steps_done), double(r.steps_done) / double(spe),
                                    r.result.loss,        lr,
                                    r.result.grad_norm,   r.tokens_per_s,
                                    now.spent.wall_s,     now.spent.cpu_s};
       },
       .show = [&](const attn::train::StepReport& r, bool) -> attn::train::ProgressText {
         char text[200];
         std::snprintf(
             text, sizeof text,
             "epoch %.2f/%.2f step %lld/%lld | loss %.4f (epoch %.4f) | lr %.2e | %.0f tok/s",
             double(r.steps_done) / double(spe), o.epochs, (long long)r.steps_done,
             (long long)total, r.result.loss, epoch_loss / double(epoch_steps), lr, r.tokens_per_s);
         const bool epoch_end = r.steps_done % spe == 0;
         if (epoch_end) epoch_loss = 0, epoch_steps = 0;
         return {text, epoch_end || r.last};
       },
       .agree = [&](bool flag) { return dp.any(flag); }});
  if (!dp.leader()) return trainer.exit_status(ran);

  if (ran.steps_run == 0) {
    // Stopped before the first step: nothing was written, an earlier run's files are as they were.
    std::printf("%s\n", session.end_line(ran).c_str());
    return trainer.exit_status(ran);
  }
  const attn::train::RunTime now = session.this_session(), all = session.spent();
  std::printf(
      "%s: %lld steps in %s wall, %.0f CPU s (all sessions of this run: %s wall, %.0f CPU s), "
      "final loss %.4f\n",
      stage_name(stage), (long long)ran.steps_run, format_duration(now.wall_s).c_str(), now.cpu_s,
      format_duration(all.wall_s).c_str(), all.cpu_s, loss);
  if (const std::string line = session.end_line(ran); !line.empty())
    std::printf("%s\n", line.c_str());
  plot::write_svg(
      svg, "birthplace " + std::string(stage_name(stage)) + ": " + variant, "epoch", "loss",
      {{"training loss", "#1f77b4", trainer.files().column(1), trainer.files().column(2)}});
  std::printf("checkpoint: %s\nlog: %s\nplot: %s\n", out.c_str(), log_path.c_str(), svg.c_str());
  std::printf("wall time: %s\n", format_duration(seconds_since(t_start)).c_str());
  return trainer.exit_status(ran);
}

// ---- evaluation ------------------------------------------------------------------------------

// The accuracy line, then how many right answers the same answers would get if they ignored the
// questions (data::chance_level): a model that guesses frequent places ("Berlin" to most people)
// can beat zero without knowing a single fact.
void report(const data::QAEvaluation& r, const data::QADataset& qa, const Options& o) {
  std::printf("Correct: %lld out of %lld: %.2f%%\n", (long long)r.correct, (long long)r.total,
              100.0 * r.accuracy());
  const data::ChanceLevel c = data::chance_level(qa, r.predictions);
  std::printf(
      "By chance (the same answers, shuffled): %.2f right on average; p = %.3g for %lld or "
      "more (%lld shuffles)\n",
      c.expected, c.p_at_least, (long long)c.correct, (long long)c.shuffles);
  if (!o.outputs_path.empty()) {
    io::write_file_atomically(o.outputs_path, data::predictions_text(r.predictions));
    std::printf("predictions: %s\n", o.outputs_path.c_str());
  }
}

int evaluate(const Options& o, const io::Safetensors& file, const std::string& variant) {
  attn::set_num_threads(o.threads);
  attn::set_denormals(attn::parse_denormals(o.denormals));
  Model model(io::get_gpt_config(file, o.reading_params), examples::attention_factory(variant));
  io::get_parameters(file, model, o.reading_params);
  const auto tok =
      data::CharTokenizer::from_vocabulary(io::metadata_string(file, "vocab", o.reading_params));
  const data::QADataset qa(tok, examples::read_corpus(o.eval_corpus), model.config().block_size,
                           o.eval_corpus);
  attn::train::ProgressLine progress;
  const auto t0 = std::chrono::steady_clock::now();
  const data::QAEvaluation r = data::evaluate_greedy(model, tok, qa, [&](index_t done, index_t n) {
    const double s = seconds_since(t0);
    progress.show(double(done) / double(n),
                  "question " + std::to_string(done) + "/" + std::to_string(n),
                  s / double(done) * double(n - done), done == n);
  });
  progress.finish();
  std::printf("%s on %s (%s attention), %.1f s\n", o.reading_params.c_str(), o.eval_corpus.c_str(),
              io::metadata_string(file, "variant", o.reading_params).c_str(), seconds_since(t0));
  report(r, qa, o);
  return 0;
}

// recall: how many of the questions' facts a pretrained model writes out in the pretraining
// format (data::recall_facts): the corpus line that names the person and, after the name, the
// answer, with the answer masked, "prefix ⁇ suffix ⁇", completed greedily.
int recall(const Options& o, const io::Safetensors& file) {
  attn::set_num_threads(o.threads);
  attn::set_denormals(attn::parse_denormals(o.denormals));
  const std::string& variant = io::metadata_string(file, "variant", o.reading_params);
  Model model(io::get_gpt_config(file, o.reading_params), examples::attention_factory(variant));
  io::get_parameters(file, model, o.reading_params);
  const auto tok =
      data::CharTokenizer::from_vocabulary(io::metadata_string(file, "vocab", o.reading_params));
  const index_t block = model.config().block_size;
  const data::QADataset qa(tok, examples::read_corpus(o.eval_corpus), block, o.eval_corpus);
  const std::string text = examples::read_corpus(o.pretrain_corpus);
  const data::SpanCorruption corpus =
      examples::about(o.pretrain_corpus, [&] { return data::SpanCorruption(tok, text, block); });
  attn::train::ProgressLine progress;
  const auto t0 = std::chrono::steady_clock::now();
  const data::FactRecall r = data::recall_facts(
      model, tok, qa, corpus, data::birth_question_subject, [&](index_t done, index_t n) {
        const double s = seconds_since(t0);
        progress.show(double(done) / double(n),
                      "question " + std::to_string(done) + "/" + std::to_string(n),
                      s / double(done) * double(n - done), done == n);
      });
  progress.finish();
  std::printf("%s on %s, facts as %s states them (%s attention), %.1f s\n",
              o.reading_params.c_str(), o.eval_corpus.c_str(), o.pretrain_corpus.c_str(),
              variant.c_str(), seconds_since(t0));
  std::printf(
      "Recalled: %lld out of %lld probed: %.2f%% (%lld of %lld questions not probed: no "
      "line of the corpus starts with the name and names the answer after it within its "
      "first %lld characters)\n",
      (long long)r.recalled, (long long)r.probed,
      r.probed > 0 ? 100.0 * double(r.recalled) / double(r.probed) : 0.0,
      (long long)(r.total - r.probed), (long long)r.total, (long long)corpus.max_truncation());
  const data::ChanceLevel c = data::recall_chance_level(qa, r);
  std::printf(
      "By chance (the same completions, shuffled over the probed questions): %.2f right on "
      "average; "
      "p = %.3g for %lld or more (%lld shuffles)\n",
      c.expected, c.p_at_least, (long long)c.correct, (long long)c.shuffles);
  if (!o.outputs_path.empty()) {
    // One line per question: recalled, missed or unprobed, a tab, the completion (escaped as in
    // the predictions files; empty where unprobed).
    std::string out;
    const std::string completions = data::predictions_text(r.completions);
    std::size_t begin = 0;
    for (index_t i = 0; i < r.total; ++i) {
      const std::size_t end = completions.find('\n', begin);
      const char* status = !r.was_probed[std::size_t(i)]    ? "unprobed"
                           : r.was_recalled[std::size_t(i)] ? "recalled"
                                                            : "missed";
      out += status;
      out += '\t';
      out.append(completions, begin, end - begin + 1);
      begin = end + 1;
    }
    io::write_file_atomically(o.outputs_path, out);
    std::printf("completions: %s\n", o.outputs_path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto job = examples::join_job(argc, argv);  // the MPI job, when run under mpirun
  attn::dist::DataParallel& dp = *job;
  CLI::App app{
      "birthplace: pretrain a GPT with span corruption, finetune it to answer \"Where was X "
      "born?\", evaluate it (XCS224N ps5 with attn)"};
  app.require_subcommand(1);
  app.footer(
      "pretrain and finetune refuse a --writing-params where a run's files exist unless "
      "--overwrite is given, and finetune never writes the checkpoint it reads; --resume "
      "continues a run with its saved settings (an option that contradicts them is an error). "
      "Ctrl-C finishes the step, saves, plots and exits with status 130; a second Ctrl-C quits "
      "at once.\nExit status: 0 done, 1 error, 2 bad option, 130 interrupted (saved).");

  // Each subcommand's options are one settings table (declare_stage, ...); CLI11 only reads them.
  Options pre = stage_options(Stage::pretrain), fine = stage_options(Stage::finetune), ev;
  Settings pre_settings, fine_settings, evaluate_settings, recall_settings, london_settings;
  declare_stage(pre_settings, pre, Stage::pretrain);
  declare_stage(fine_settings, fine, Stage::finetune);
  evaluate_settings.text("reading-params", ev.reading_params, "finetuned checkpoint");
  evaluate_settings.text("variant", ev.variant, "check that the checkpoint is of this variant")
      .choices(examples::attention_names(true));
  evaluate_settings.integer("threads", ev.threads, "OpenMP threads").range(1, 256);
  declare_denormals(evaluate_settings, ev);
  declare_questions(evaluate_settings, ev);
  recall_settings.text("reading-params", ev.reading_params, "pretrained (or finetuned) checkpoint");
  recall_settings.text("pretrain-corpus", ev.pretrain_corpus,
                       "the corpus whose statements of the facts are probed");
  recall_settings.integer("threads", ev.threads, "OpenMP threads").range(1, 256);
  declare_denormals(recall_settings, ev);
  declare_questions(recall_settings, ev);
  london_settings.text("pretrain-corpus", ev.pretrain_corpus, "text that defines the vocabulary");
  declare_vocabulary(london_settings, ev);
  declare_questions(london_settings, ev);

  CLI::App* pretrain =
      app.add_subcommand("pretrain", "pretrain on the corpus with span corruption");
  CLI::App* finetune =
      app.add_subcommand("finetune",
                         "finetune on question/answer pairs (from scratch, or from "
                         "--reading-params)");
  CLI::App* evaluate_cmd =
      app.add_subcommand("evaluate", "greedy answers to a TSV's questions: exact-match accuracy");
  CLI::App* recall_cmd = app.add_subcommand(
      "recall",
      "how many of the questions' facts a pretrained model writes out in the pretraining format");
  CLI::App* london = app.add_subcommand("london", "accuracy of answering \"London\" every time");
  const std::pair<CLI::App*, Settings*> commands[] = {{pretrain, &pre_settings},
                                                      {finetune, &fine_settings},
                                                      {evaluate_cmd, &evaluate_settings},
                                                      {recall_cmd, &recall_settings},
                                                      {london, &london_settings}};
  // What the table does not say: which inputs must exist, and which options exclude others.
  for (const auto& [cmd, settings] : commands) {
    examples::add_settings(*cmd, *settings);
    for (const char* input : {"--pretrain-corpus", "--vocabulary-corpus", "--finetune-corpus",
                              "--reading-params", "--resume", "--eval-corpus"})
      if (settings->contains(std::string_view(input).substr(2)))
        cmd->get_option(input)->check(CLI::ExistingFile);
    if (settings->contains("resume")) {
      cmd->get_option("--resume")->excludes("--overwrite");
      cmd->get_option("--budget-minutes")->excludes("--epochs");
    }
  }
  finetune->get_option("--reading-params")->excludes("--resume");
  evaluate_cmd->get_option("--reading-params")->required();
  recall_cmd->get_option("--reading-params")->required();

  std::string error;  // the job prints one rank's error, once (DataParallel::finish)
  const int status = examples::run_main(
      app, argc, argv,
      [&] {
        if (*pretrain || *finetune) {
          const Stage stage = *pretrain ? Stage::pretrain : Stage::finetune;
          Options& o = *pretrain ? pre : fine;
          ATTN_CHECK(!o.writing_params.empty() || !o.resume.empty(), attn::value_error,
                     "birthplace ", stage_name(stage), ": give --writing-params (or --resume)");
          const std::string& source = !o.resume.empty() ? o.resume : o.reading_params;
          io::Safetensors file;
          if (!source.empty()) {
            file = open_checkpoint(source);
            // A variant this program knows, or a value_error before anything else is read.
            examples::about(source, [&] {
              return examples::attention_index(io::metadata_string(file, "variant", source));
            });
          }
          return train(o, *pretrain ? pre_settings : fine_settings, stage, file, dp);
        }
        if (!dp.leader()) return 0;  // evaluating is not data-parallel: rank 0 does it
        const Options& o = ev;
        if (!o.outputs_path.empty()) {
          attn::train::check_output_file(o.outputs_path, "--outputs-path", false);
          // london reads the pretraining and vocabulary corpora; evaluate the checkpoint; recall
          // the checkpoint and the pretraining corpus.
          attn::train::check_not_an_input(
              o.outputs_path, "--outputs-path",
              {{o.eval_corpus, "--eval-corpus"},
               {*evaluate_cmd || *recall_cmd ? o.reading_params : o.vocabulary_corpus,
                *evaluate_cmd || *recall_cmd ? "--reading-params" : "--vocabulary-corpus"},
               {*evaluate_cmd ? std::string() : o.pretrain_corpus, "--pretrain-corpus"}});
        }
        if (*evaluate_cmd) {
          const io::Safetensors file = open_checkpoint(o.reading_params);
          const std::string& variant = io::metadata_string(file, "variant", o.reading_params);
          const std::size_t index =
              examples::about(o.reading_params, [&] { return examples::attention_index(variant); });
          ATTN_CHECK(
              !evaluate_settings.given("variant") || index == examples::attention_index(o.variant),
              attn::value_error, "birthplace: ", o.reading_params, " holds a ", variant,
              " model, not ", o.variant);
          return evaluate(o, file, variant);
        }
        if (*recall_cmd) {
          const io::Safetensors file = open_checkpoint(o.reading_params);
          examples::about(o.reading_params, [&] {
            return examples::attention_index(
                io::metadata_string(file, "variant", o.reading_params));
          });
          return recall(o, file);
        }
        const data::CharTokenizer tok = new_vocabulary(o, examples::read_corpus(o.pretrain_corpus));
        const data::QADataset qa(tok, examples::read_corpus(o.eval_corpus), 1 << 20, o.eval_corpus);
        std::printf("always \"London\" on %s\n", o.eval_corpus.c_str());
        report(data::evaluate_constant(qa, "London"), qa, o);
        return 0;
      },
      {&error, !dp.leader()});
  return dp.finish(status, [&] {
    if (!error.empty()) examples::print_error(error);
  });
}
