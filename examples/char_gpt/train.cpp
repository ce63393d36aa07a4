// examples/char_gpt/train.cpp: char_gpt's training and sampling, once its command line (main.cpp)
// is read: everything checked before the first step, the training loop with its log, plot and
// checkpoints, the sample. Every --attention variant is one model type, nn::GPT<AnyCausal>: this
// file compiles the model, the loop and the checkpoint code once, the attention modules once each.
#include <attn/attn.hpp>
#include <attn/core/float_env.hpp>
#include <attn/data/data.hpp>
#include <attn/io/checkpoint.hpp>
#include <attn/io/io.hpp>
#include <attn/optim/optim.hpp>
#include <attn/train/memory.hpp>
#include <attn/train/plot.hpp>
#include <attn/train/settings.hpp>
#include <attn/train/trainer.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../common/attention_variants.hpp"
#include "../common/char_checkpoint.hpp"
#include "../common/distributed.hpp"
#include "../common/format.hpp"
#include "../common/model_config.hpp"
#include "char_gpt.hpp"
#include "export_hf.hpp"
#include "tokenizer.hpp"

namespace {

namespace plot = attn::train::plot;

namespace fs = std::filesystem;
using attn::index_t;
using attn::Tensor;
namespace nn = attn::nn;
namespace io = attn::io;
namespace optim = attn::optim;

using attn::train::seconds_since;
using attn::train::shortest_text;
using attn::train::step_seed;
using examples::open_checkpoint;

// ---- options ---------------------------------------------------------------------------------

using char_gpt::SampleOptions;
using char_gpt::Tokenizer;
using char_gpt::TrainOptions;

const std::map<std::string, nn::PositionEncoding> position_names{
    {"learned", nn::PositionEncoding::learned},
    {"sinusoidal", nn::PositionEncoding::sinusoidal},
    {"none", nn::PositionEncoding::none}};

std::string position_name(nn::PositionEncoding p) {
  for (const auto& [name, value] : position_names)
    if (value == p) return name;
  return "?";
}

const std::vector<std::string> log_columns{"step",      "train_loss",   "val_loss", "lr",
                                           "grad_norm", "tokens_per_s", "elapsed_s"};

// ---- checkpoints -----------------------------------------------------------------------------

// Takes the saved run's settings into `o` through the table (a contradicting option is an error
// naming both values), and the split; returns where the run stands.
attn::train::RunPoint restore_run(const io::Safetensors& file, attn::train::Settings& settings,
                                  TrainOptions& o, const std::string& source) {
  settings.resume_from(file.metadata, source,
                       "--stop-at, --threads, --shards and the sampling options may change");
  o.train_fraction = io::metadata_double(file, "train.train_fraction", source);
  ATTN_CHECK(o.train_fraction > 0 && o.train_fraction <= 1 && o.shards <= o.batch, attn::io_error,
             source, ": the saved training settings are out of range");
  return attn::train::read_run_point(file.metadata, source);
}

// A checkpoint: the model, the optimizer, the table's settings (declare_train_settings) and the
// run's point, the fixed train/validation split and the text's checksum.
template <class Model, class Optimizer>
void save_checkpoint(const fs::path& path, Model& model, Optimizer& opt, const Tokenizer& tok,
                     const attn::train::Settings& settings, const TrainOptions& o,
                     const attn::train::RunPoint& point, std::uint32_t data_crc) {
  io::Safetensors file;
  io::put_parameters(file, model);
  io::put_optimizer_state(file, opt);
  io::put_gpt_config(file, model.config());
  auto& m = file.metadata;
  m["format"] = "attn.char_gpt.v1";
  m["attention"] = o.attention;
  tok.save(file);
  attn::train::save_run_point(m, settings, point);
  m["train.data_crc32"] = std::to_string(data_crc);
  m["train.train_fraction"] = shortest_text(o.train_fraction);
  io::save_safetensors(path, file);
}

// The prompt as token ids, checked before any work: not empty, and (characters) every character in
// the vocabulary.
std::vector<std::int32_t> encode_prompt(const Tokenizer& tok, const std::string& prompt) {
  ATTN_CHECK(!prompt.empty(), attn::value_error,
             "--prompt is empty: sampling continues a text of at least one character");
  return examples::about("--prompt", [&] { return tok.encode(prompt); });
}

// ---- training --------------------------------------------------------------------------------

// One model type for every --attention variant (the variant is chosen when the model is built):
// the training and sampling code below is compiled once.
using Model = nn::GPT<examples::AnyCausal>;

int train(TrainOptions& o, attn::train::Settings& settings, attn::dist::DataParallel& dp) {
  if (o.eval_every > o.steps) o.eval_every = o.steps;
  // Continuing a checkpoint: its attention variant unless --attention says otherwise (then the
  // mismatch is refused below).
  const std::string from = !o.resume.empty() ? o.resume : o.init_from;
  if (!from.empty() && !settings.given("attention"))
    o.attention = io::metadata_string(open_checkpoint(from), "attention", from);
  const attn::train::StopRequest stop;
  attn::set_num_threads(o.threads);
  attn::set_denormals(attn::parse_denormals(o.denormals));
  attn::set_matmul_precision(o.precision == "bf16" ? attn::MatmulPrecision::bf16
                                                   : attn::MatmulPrecision::float32);

  // ---- where the run comes from, and where it goes: everything checked before the first step
  io::Safetensors resumed;
  const bool resuming = !o.resume.empty();
  attn::train::RunPoint resumed_at;  // a new run: step 0
  fs::path out(o.out);
  if (resuming) {
    // A resumed run continues in its own directory.
    const fs::path dir =
        fs::path(o.resume).parent_path().empty() ? fs::path(".") : fs::path(o.resume).parent_path();
    ATTN_CHECK(!settings.given("out") || attn::train::same_path(o.out, dir), attn::value_error,
               "--out ", o.out, " conflicts with --resume ", o.resume,
               ": a resumed run continues in the directory of its checkpoint, ", dir.string());
    out = dir;
    resumed = open_checkpoint(o.resume);
    // The text defaults to the run's own (its content is checked below); --shards, when given,
    // splits the batches another way from here on.
    resumed_at = restore_run(resumed, settings, o, o.resume);
  }
  o.shards = dp.shards(o.shards, o.batch);
  if (!o.init_from.empty()) resumed = open_checkpoint(o.init_from);
  const std::string& source = resuming ? o.resume : o.init_from;
  const bool from_checkpoint = resuming || !o.init_from.empty();
  std::optional<nn::GPTConfig> saved_model;
  if (from_checkpoint) {
    saved_model = io::get_gpt_config(resumed, source);
    for (const char* option : {"vocab-from", "bpe-vocab", "tokenizer-file"})
      ATTN_CHECK(!settings.given(option), attn::value_error, "--", option, " conflicts with ",
                 resuming ? "--resume" : "--init-from", " ", source,
                 ": the tokenizer is the checkpoint's");
  }
  const fs::path checkpoint = out / "checkpoint.safetensors", log_path = out / "log.csv",
                 svg = out / "loss.svg", png = out / "loss.png", sample_path = out / "sample.txt";
  ATTN_CHECK(o.init_from.empty() || !attn::train::same_path(o.init_from, checkpoint),
             attn::value_error, "--init-from ", o.init_from, " is the checkpoint this run writes (",
             checkpoint.string(), "): choose another --out");
  // A resumed run writes its directory's checkpoint.safetensors: resuming from another file there
  // would replace that run's checkpoint and cut its log.
  ATTN_CHECK(!resuming || attn::train::same_path(o.resume, checkpoint), attn::value_error,
             "--resume ", o.resume, " is not the checkpoint of the run in its directory (",
             checkpoint.string(),
             "): char_gpt resumes a run from its own checkpoint.safetensors; "
             "copy the file into an empty directory as checkpoint.safetensors and resume that");
  // The run's files, owned by rank 0 alone (the other ranks write none; their --out may not even
  // exist): checked, locked and guarded before anything is read or trained.
  attn::train::RunRequest request{
      .program = "char_gpt",
      .option = "--out",
      .where = out,
      .resuming = resuming,
      .overwrite = o.overwrite,
      .how_to_continue = "continue that run with --resume " + checkpoint.string(),
      .inputs = {{o.data, "--data"}}};
  for (const std::string& v : o.vocab_from) request.inputs.push_back({v, "--vocab-from"});
  attn::train::Trainer trainer(
      {checkpoint, log_path, log_columns, {svg, png, sample_path}, out / ".lock"}, request, stop,
      dp.leader());
  attn::train::Session& session =
      trainer.start_session({.from = resumed_at,
                             .total = o.steps,
                             .stop_at = o.stop_at,
                             .source = o.resume,
                             .checkpoint = checkpoint.string(),
                             .continue_with = "char_gpt --resume " + checkpoint.string()});
  if (session.finished()) {
    if (dp.leader())
      std::printf("%s; `char_gpt sample %s` samples from it\n",
                  session.finished_line("char_gpt").c_str(), o.resume.c_str());
    return 0;
  }

  // The corpus and its vocabulary (from the checkpoint when continuing one).
  const std::string text = examples::read_corpus(o.data);
  const std::uint32_t data_crc =
      io::detail::crc32(std::as_bytes(std::span<const char>(text.data(), text.size())));
  if (resuming && resumed.metadata.count("train.data_crc32"))
    ATTN_CHECK(std::to_string(data_crc) == resumed.metadata.at("train.data_crc32"),
               attn::value_error, "--data ", o.data, " is not the text the run in ", o.resume,
               " was trained on (its CRC-32 differs): resume with the same --data");
  Tokenizer tok;
  if (from_checkpoint) {
    tok = examples::about(source, [&] { return Tokenizer::from_checkpoint(resumed, source); });
    ATTN_CHECK(!settings.given("tokenizer") || o.tokenizer == tok.kind(), attn::value_error,
               "--tokenizer ", o.tokenizer, " conflicts with ", source, ", a model of --tokenizer ",
               tok.kind());
  } else {
    std::string all = text;
    for (const std::string& extra : o.vocab_from) all += examples::read_corpus(extra);
    tok = Tokenizer::make(o.tokenizer, all, std::int32_t(o.bpe_vocab), o.tokenizer_file);
  }
  // Training split: the first train_fraction of the text, of which only data_fraction is used
  // (the data-size studies): the start of the split, or with --data-chunks N the start of each of
  // N equal pieces of it, joined in order (spread over the whole split); validation: always the
  // rest of the text.
  std::vector<std::int32_t> tokens = examples::about(
      o.data + " (with the vocabulary of " + (from_checkpoint ? source : o.data) + ")",
      [&] { return tok.encode(text); });
  const auto n_train = std::size_t(double(tokens.size()) * o.train_fraction);
  std::vector<std::int32_t> kept =
      attn::data::spread_sample(tokens, n_train, o.data_fraction, std::size_t(o.data_chunks));
  const std::size_t keep = kept.size();
  kept.insert(kept.end(), tokens.begin() + std::ptrdiff_t(n_train), tokens.end());
  std::vector<std::int32_t>().swap(tokens);  // the batches hold what is used of it
  const auto batches = attn::data::TextBatches::split_at(std::move(kept), index_t(keep));

  if (from_checkpoint && io::metadata_string(resumed, "attention", source) != o.attention)
    throw attn::value_error("char_gpt: " + source + " was trained with --attention " +
                            io::metadata_string(resumed, "attention", source) + ", not " +
                            o.attention);
  std::map<std::string, std::string> saved_positions;
  if (saved_model) saved_positions["positions"] = position_name(saved_model->positions);
  nn::GPTConfig config = examples::run_config(
      saved_model, source, resuming, settings,
      {tok.size(), o.block, o.layers, o.heads, o.embd, o.dropout, o.seed}, saved_positions);
  if (!saved_model) {
    config.positions = position_names.at(o.positions);
    char_gpt::apply_arch(config, o.arch);
  }
  const std::string arch = char_gpt::arch_of(config);
  ATTN_CHECK(!settings.given("arch") || arch == o.arch, attn::value_error, "--arch ", o.arch,
             " conflicts with ", source, ", a ", arch, " model");
  // --export-hf: a format of a known architecture, into a place that holds no earlier export.
  if (!o.export_hf.empty() && dp.leader()) {
    ATTN_CHECK(arch != "char_gpt" && o.attention == char_gpt::arch_attention(arch),
               attn::value_error,
               "--export-hf writes a gpt2 or llama model (--arch gpt2 or llama, "
               "their attention); this run's is ",
               arch, " with --attention ", o.attention);
    ATTN_CHECK(!fs::exists(o.export_hf) || o.overwrite, attn::value_error, "--export-hf ",
               o.export_hf, " exists: choose another directory, or pass --overwrite");
    ATTN_CHECK(!attn::train::same_path(o.export_hf, out), attn::value_error, "--export-hf ",
               o.export_hf, " is the run's own directory --out: choose another");
    attn::train::check_writable_directory(o.export_hf, "--export-hf");
  }
  const index_t block = config.block_size;
  for (const auto split : {attn::data::Split::train, attn::data::Split::validation})
    ATTN_CHECK(batches.size(split) > block, attn::value_error, "char_gpt: the ",
               split == attn::data::Split::train ? "training" : "validation", " split of ", o.data,
               " has ", batches.size(split), " ", tok.unit(), ", fewer than the block (", block,
               ") + 1: use a longer text or a smaller --block");
  std::vector<std::int32_t> prompt;
  if (o.sample_tokens > 0) prompt = encode_prompt(tok, o.prompt);

  const std::string smaller = "use a smaller --batch, --block or model";
  attn::train::check_memory(attn::train::parameters_estimate(config), "char_gpt", smaller);
  Model model(config, examples::attention_factory(o.attention));
  const std::string memory = attn::train::check_memory(
      attn::train::training_memory(model, block, o.batch), "char_gpt", smaller);
  auto params = optim::parameters_of<float>(model);
  optim::AdamConfig ac;
  ac.lr = o.lr;
  ac.beta2 = o.beta2;
  ac.weight_decay = o.weight_decay;
  optim::AdamW<float> opt(params, ac);
  if (from_checkpoint) io::get_parameters(resumed, model, source);
  dp.start();  // every rank's checks passed (or the first that failed reports, once)
  dp.broadcast_parameters(model);
  if (resuming) io::get_optimizer_state(resumed, opt, source);
  const optim::WarmupCosine schedule{o.lr, o.min_lr, std::min(o.warmup, o.steps), o.steps};

  const index_t n_params = nn::parameter_count(model);
  index_t n_attn = 0;
  model.for_each_parameter([&](const std::string& name, attn::Parameter<float>& p) {
    if (name.find(".attn.") != std::string::npos) n_attn += p.value.numel();
  });
  if (dp.leader())
    std::printf(
        "char_gpt: %s attention, %lld layers, %lld heads, %lld embd, block %lld, vocab %d (%s)\n"
        "          %lld parameters (%lld in attention), %lld training tokens, %d threads\n"
        "          products: %s%s; memory: %s\n",
        o.attention.c_str(), (long long)config.layers, (long long)config.heads,
        (long long)config.d_model, (long long)block, tok.size(), tok.kind(), (long long)n_params,
        (long long)n_attn, (long long)batches.size(attn::data::Split::train), o.threads,
        attn::matmul_precision_name().c_str(),
        o.precision == "bf16" && attn::matmul_precision() != attn::MatmulPrecision::bf16
            ? " (bf16 requested: this CPU has no AVX512_BF16)"
            : "",
        memory.c_str());
  if (dp.leader() && dp.ranks() > 1)
    std::printf("          data parallel: %d ranks, %lld shards per step\n", dp.ranks(),
                (long long)o.shards);
  if (dp.leader() && session.start() > 0)
    std::printf("          resuming at step %lld of %lld\n", (long long)session.start(),
                (long long)o.steps);
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

  // The loop (attn/train/trainer.hpp): a step is a batch and dropout drawn from (seed, step), so a
  // resumed run repeats the uninterrupted one; every --eval-every steps and at the session's last
  // (its end, --stop-at or Ctrl-C) an evaluation, the checkpoint, then its log row: a crash between
  // the two loses a row that the resumed run writes again, never leaves a row for a step no
  // checkpoint holds.
  double window_loss = 0, val = std::nan(""), window_tps = 0;
  std::int64_t window = 0;
  auto t_window = std::chrono::steady_clock::now();
  const auto step = [&](std::int64_t s) {
    attn::Rng rng(step_seed(o.seed, 1, s));
    batches.sample(attn::data::Split::train, o.batch, block, rng, x, y);
    const optim::StepResult r = dp.step(model, tape, opt, params, x, y, -100, schedule(s),
                                        o.grad_clip, rng.split(), 0, o.shards);
    window_loss += r.loss;
    ++window;
    return r;
  };
  const attn::train::LoopEnd ran = trainer.run(
      double(o.batch * block), step,
      {.save_every = o.eval_every,
       .before_save =
           [&](const attn::train::StepReport& r) {
             val = evaluate(r.steps_done - 1);
             window_tps = double(window) * double(o.batch * block) / seconds_since(t_window);
             dp.check_replicas(model);
           },
       .save =
           [&](const attn::train::RunPoint& point) {
             save_checkpoint(checkpoint, model, opt, tok, settings, o, point, data_crc);
           },
       .log = [&](const attn::train::StepReport& r, const attn::train::RunPoint& point,
                  bool saved) -> std::optional<std::vector<double>> {
         if (!saved) return std::nullopt;
         const std::vector<double> row{
             double(r.steps_done),       window_loss / double(window), val,
             schedule(r.steps_done - 1), r.result.grad_norm,           window_tps,
             point.spent.wall_s};
         window_loss = 0, window = 0;
         t_window = std::chrono::steady_clock::now();
         return row;
       },
       .show = [&](const attn::train::StepReport& r, bool saved) -> attn::train::ProgressText {
         char text[160];
         std::snprintf(text, sizeof text, "step %lld/%lld | loss %.4f | val %.4f | %.0f tok/s",
                       (long long)r.steps_done, (long long)o.steps, r.result.loss, val,
                       r.tokens_per_s);
         return {text, saved};
       },
       .agree = [&](bool flag) { return dp.any(flag); }});
  if (!dp.leader()) return trainer.exit_status(ran);

  if (ran.steps_run == 0) {
    // Stopped before the first step: nothing was written, an earlier run's files are as they were.
    std::printf("%s\n", session.end_line(ran).c_str());
    return trainer.exit_status(ran);
  }
  std::printf("training: %lld steps in %.1f s, %.0f tokens/s, val loss %.4f at step %lld\n",
              (long long)ran.steps_run, ran.seconds, ran.tokens_per_s, val,
              (long long)ran.steps_done);
  plot::write_svg(
      svg, "char_gpt: " + o.attention + " attention", "step", "loss",
      {{"train", "#1f77b4", trainer.files().column(0), trainer.files().column(1)},
       {"validation", "#d62728", trainer.files().column(0), trainer.files().column(2)}});
  const bool have_png = plot::gnuplot_png(log_path, png, "char_gpt: " + o.attention,
                                          {{2, "train"}, {3, "validation"}});
  std::printf("plot: %s%s%s\n", svg.c_str(), have_png ? ", " : "", have_png ? png.c_str() : "");
  std::printf("checkpoint: %s\n", checkpoint.c_str());
  if (const std::string line = session.end_line(ran); !line.empty())
    std::printf("%s\n", line.c_str());
  if (ran.stopped) return trainer.exit_status(ran);
  if (!o.export_hf.empty() && ran.steps_done == o.steps) {
    char_gpt::export_hf(o.export_hf, model);
    tok.export_hf(o.export_hf, block);
    std::printf("exported (Hugging Face format, %s): %s\n", arch.c_str(), o.export_hf.c_str());
  }
  std::fflush(stdout);  // the run's files are named before a long sample starts

  if (o.sample_tokens > 0) {
    nn::SampleConfig s;
    s.max_tokens = o.sample_tokens;
    s.temperature = o.temperature;
    s.seed = o.seed;
    s.stop_requested = [&] { return stop.requested(); };
    const std::vector<std::int32_t> ids = nn::generate(model, prompt, s);
    if (stop.requested()) {
      // Ctrl-C while sampling: the run is saved; the sample is not finished, so not written.
      std::printf("sampling interrupted after %zu of %lld %s: no sample written\n", ids.size(),
                  (long long)o.sample_tokens, tok.unit());
      return stop.exit_status();
    }
    const std::string sample = o.prompt + tok.decode(ids);
    io::write_file_atomically(sample_path, sample);
    std::printf("sample (%lld %s, temperature %.2f):\n%s\n", (long long)o.sample_tokens, tok.unit(),
                o.temperature, sample.c_str());
  }
  return 0;
}

// ---- sampling from a checkpoint ------------------------------------------------------------

int sample(const SampleOptions& o, const io::Safetensors& file) {
  attn::set_num_threads(o.threads);
  Model model(io::get_gpt_config(file, o.checkpoint),
              examples::attention_factory(io::metadata_string(file, "attention", o.checkpoint)));
  io::get_parameters(file, model, o.checkpoint);
  const Tokenizer tok =
      examples::about(o.checkpoint, [&] { return Tokenizer::from_checkpoint(file, o.checkpoint); });
  nn::SampleConfig s;
  s.max_tokens = o.tokens;
  s.temperature = o.temperature;
  s.top_k = o.top_k;
  s.seed = o.seed;
  s.use_cache = !o.no_cache;
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = nn::generate(model, encode_prompt(tok, o.prompt), s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s%s\n", o.prompt.c_str(), tok.decode(ids).c_str());
  std::fprintf(stderr, "%zu tokens in %.2f s (%.0f tokens/s, %s)\n", ids.size(), secs,
               double(ids.size()) / secs, s.use_cache ? "key/value cache" : "no cache");
  return 0;
}

}  // namespace

namespace char_gpt {

Job::Job(int& argc, char**& argv) : dp_(examples::join_job(argc, argv)) {}
Job::~Job() = default;

int Job::train(TrainOptions& options, attn::train::Settings& settings) {
  return ::train(options, settings, *dp_);
}

int Job::sample(const SampleOptions& options) {
  if (!dp_->leader()) return 0;
  return ::sample(options, open_checkpoint(options.checkpoint));
}

bool Job::leader() const {
  return dp_->leader();
}

int Job::finish(int status, const std::string& error) {
  return dp_->finish(status, [&] {
    if (!error.empty()) examples::print_error(error);
  });
}

}  // namespace char_gpt
