// examples/seq2seq: trains encoder-decoders with attention to translate dates written by people
// ("the fifth of march 1987") into ISO 8601 ("1987-03-05"): a GRU encoder-decoder whose decoder
// attention score is Dot, Bilinear or Additive (a compile-time choice), and a Transformer
// encoder-decoder with multi-head cross-attention. Prints a table of held-out exact-match accuracy
// per model and draws the alignments (terminal heatmap; PNG via gnuplot, else SVG).
// Does not save checkpoints: each model trains in a minute or two and is evaluated right away.
#include <CLI/CLI.hpp>
#include <attn/train/interrupt.hpp>
#include <attn/train/loop.hpp>
#include <attn/train/plot.hpp>
#include <attn/train/run_files.hpp>
#include <attn/train/run_lock.hpp>
#include <attn/train/settings.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../common/cli.hpp"
#include "models.hpp"

namespace {

namespace plot = attn::train::plot;

namespace fs = std::filesystem;
namespace optim = attn::optim;
using attn::train::seconds_since;
using seq2seq::index_t;

struct Options {
  std::vector<std::string> models{"dot", "bilinear", "additive", "transformer"};
  std::int64_t steps = 1500;
  index_t batch = 64;
  double lr = 3e-3;
  std::int64_t warmup = 100;
  std::uint64_t seed = 1;
  int threads = 1;
  index_t test_size = 2000;
  std::int64_t eval_every = 250;
  index_t show = 3;  // examples whose alignment is printed and drawn
  std::string out = "runs/seq2seq";
  bool overwrite = false;
  seq2seq::RnnConfig rnn;
  seq2seq::TransformerConfig transformer;
};

struct Result {
  std::string model;
  index_t parameters = 0;
  double seconds = 0;      // wall clock (a shared machine stretches it)
  double cpu_seconds = 0;  // this process's CPU time: training and the progress probes
  double final_loss = 0;
  std::int64_t steps = 0;  // trained: o.steps, or fewer when a signal stopped the run
  double exact = 0;        // whole output equal to the ISO date
  double char_acc = 0;     // characters in the right place
  std::vector<double> per_format;
};

// A batch of the training side drawn from a seed that depends only on (run seed, step).
dates::Batch train_batch(const Options& o, std::int64_t step) {
  attn::Rng rng(o.seed * 0x9E3779B97F4A7C15ull + std::uint64_t(step) + 1);
  return dates::make_batch(dates::draw_many(rng, o.batch, false));
}

// The fixed held-out test set, in batches of 250.
std::vector<dates::Batch> test_batches(const Options& o) {
  attn::Rng rng(0x7E57 + o.seed);
  std::vector<dates::Batch> v;
  for (index_t done = 0; done < o.test_size; done += 250)
    v.push_back(
        dates::make_batch(dates::draw_many(rng, std::min<index_t>(250, o.test_size - done), true)));
  return v;
}

template <class Model>
void evaluate(Model& model, const std::vector<dates::Batch>& test, Result& r) {
  attn::Tape<float> tape;
  model.set_training(false);
  std::vector<int> right(dates::format_count, 0), total(dates::format_count, 0);
  long exact = 0, chars = 0, chars_right = 0, n = 0;
  for (const dates::Batch& b : test) {
    tape.clear();
    const seq2seq::Decoded d = model.greedy(tape, b);
    for (std::size_t i = 0; i < b.examples.size(); ++i) {
      const dates::Example& e = b.examples[i];
      const bool ok = d.outputs[i] == e.target;
      exact += ok, ++n;
      right[std::size_t(e.format)] += ok, ++total[std::size_t(e.format)];
      for (std::size_t c = 0; c < e.target.size(); ++c, ++chars)
        chars_right += c < d.outputs[i].size() && d.outputs[i][c] == e.target[c];
    }
  }
  r.exact = double(exact) / double(n);
  r.char_acc = double(chars_right) / double(chars);
  r.per_format.clear();
  for (int f = 0; f < dates::format_count; ++f)
    r.per_format.push_back(
        total[std::size_t(f)] ? double(right[std::size_t(f)]) / total[std::size_t(f)] : 0.0);
  model.set_training(true);
}

// The alignment of example i of a decoded batch as a heatmap: output characters down, source
// characters across (spaces shown as '_').
plot::Heatmap alignment_heatmap(const seq2seq::Decoded& d, const dates::Batch& b, std::size_t i) {
  const dates::Example& e = b.examples[i];
  const std::size_t rows = dates::target_length - 1, cols = e.source.size();
  plot::Heatmap h{{}, rows, cols, {}, {}};
  for (std::size_t t = 0; t < rows; ++t) {
    const char c = t < d.outputs[i].size() ? d.outputs[i][t] : '?';
    h.row_labels.push_back(std::string(1, c));
    for (std::size_t k = 0; k < cols; ++k)
      h.values.push_back(d.alignment(index_t(i), index_t(t), index_t(k)));
  }
  for (const char c : e.source) h.col_labels.push_back(std::string(1, c == ' ' ? '_' : c));
  return h;
}

// Trains `model` for o.steps steps (fewer when a signal stops it: Result::steps), evaluates it on
// the test dates and draws its alignments.
template <class Model>
Result train(Model& model, const Options& o, const std::vector<dates::Batch>& test,
             const attn::train::StopRequest& stop) {
  Result r;
  r.model = Model::name;
  r.parameters = attn::nn::parameter_count(model);
  auto params = optim::parameters_of<float>(model);
  optim::AdamW<float> opt(params, {.lr = o.lr, .beta1 = 0.9, .beta2 = 0.98, .weight_decay = 0.01});
  const optim::WarmupCosine schedule{o.lr, o.lr / 10, o.warmup, o.steps};
  std::printf("\n== %s: %lld parameters ==\n", r.model.c_str(),
              static_cast<long long>(r.parameters));
  std::fflush(stdout);
  attn::Tape<float> tape;
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  double smooth = 0;
  // Batches depend only on (seed, step); the loop stops after the step a signal interrupts.
  const auto step = [&](std::int64_t s) {
    const dates::Batch batch = train_batch(o, s);
    opt.zero_grad();
    tape.clear();
    const attn::Var<float> loss = model.loss(tape, batch);
    tape.backward(loss);
    const double norm = optim::clip_grad_norm(params, 1.0);
    opt.set_lr(schedule(s));
    opt.step();
    return optim::StepResult{loss.item(), norm};
  };
  const auto report = [&](const attn::train::StepReport& s) {
    smooth = s.steps_done == 1 ? s.result.loss : 0.95 * smooth + 0.05 * s.result.loss;
    if (!attn::train::due(o.eval_every, s)) return;
    Result probe;
    evaluate(model, {test.front()}, probe);
    std::printf("step %5lld  loss %.4f  exact match (250 test dates) %5.1f%%  %.0f s\n",
                static_cast<long long>(s.steps_done), smooth, 100 * probe.exact, s.seconds);
    std::fflush(stdout);
  };
  const attn::train::LoopEnd ran = attn::train::run_loop(
      {0, o.steps, o.steps, double(o.batch * dates::target_length)}, stop, step, report);
  r.steps = ran.steps_done;
  r.seconds = seconds_since(t0);
  r.cpu_seconds = double(std::clock() - c0) / CLOCKS_PER_SEC;
  r.final_loss = smooth;
  evaluate(model, test, r);

  // Alignments of the first few test dates.
  const dates::Batch& b = test.front();
  tape.clear();
  model.set_training(false);
  const seq2seq::Decoded d = model.greedy(tape, b);
  model.set_training(true);
  for (index_t i = 0; i < std::min<index_t>(o.show, index_t(b.examples.size())); ++i) {
    const plot::Heatmap h = alignment_heatmap(d, b, std::size_t(i));
    const std::string title =
        r.model + ": \"" + b.examples[std::size_t(i)].source + "\" -> " + d.outputs[std::size_t(i)];
    const fs::path file = plot::write_heatmap(
        fs::path(o.out) / (r.model + "_alignment_" + std::to_string(i)), title, h);
    if (i == 0) std::printf("\n%s\n%s", title.c_str(), plot::ascii_heatmap(h).c_str());
    std::printf("alignment: %s\n", file.c_str());
  }
  return r;
}

// The alignment plots a run of `o` writes (write_heatmap: PNG with gnuplot, else SVG).
std::vector<fs::path> alignment_files(const Options& o) {
  std::vector<fs::path> files;
  for (const std::string& m : o.models)
    for (index_t i = 0; i < o.show; ++i)
      for (const char* ext : {".png", ".svg"})
        files.push_back(fs::path(o.out) / (m + "_alignment_" + std::to_string(i) + ext));
  return files;
}

int run(const Options& o) {
  const attn::train::StopRequest stop;
  // --out: one owner, and no earlier alignments replaced unasked.
  std::optional<attn::train::RunLock> lock;
  if (o.show > 0) {
    attn::train::check_writable_directory(o.out, "--out");
    fs::create_directories(o.out);
    lock.emplace(fs::path(o.out) / ".lock", "seq2seq: " + o.out);
    attn::train::refuse_to_replace(alignment_files(o), o.overwrite, "seq2seq", "--out",
                                   "move them elsewhere");
  }
  attn::set_num_threads(o.threads);
  const std::vector<dates::Batch> test = test_batches(o);
  std::printf(
      "task: dates in words -> ISO 8601; %lld held-out test dates (never trained on); "
      "batch %lld, %lld steps, %d thread(s)\n",
      static_cast<long long>(o.test_size), static_cast<long long>(o.batch),
      static_cast<long long>(o.steps), o.threads);
  std::printf("examples: \"%s\" -> %s, \"%s\" -> %s\n", test[0].examples[0].source.c_str(),
              test[0].examples[0].target.c_str(), test[0].examples[1].source.c_str(),
              test[0].examples[1].target.c_str());
  // Each model in turn; a signal stops the one training after its step, which is then evaluated
  // as it is, and the models after it are not trained.
  std::vector<Result> results;
  for (const std::string& m : o.models) {
    if (stop.requested()) break;
    seq2seq::RnnConfig rc = o.rnn;
    rc.seed = o.seed;
    seq2seq::TransformerConfig tc = o.transformer;
    tc.seed = o.seed;
    if (m == "dot") {
      seq2seq::RnnSeq2Seq<seq2seq::DotScore> model(rc);
      results.push_back(train(model, o, test, stop));
    } else if (m == "bilinear") {
      seq2seq::RnnSeq2Seq<seq2seq::BilinearScore> model(rc);
      results.push_back(train(model, o, test, stop));
    } else if (m == "additive") {
      seq2seq::RnnSeq2Seq<seq2seq::AdditiveScore> model(rc);
      results.push_back(train(model, o, test, stop));
    } else {
      seq2seq::TransformerSeq2Seq<> model(tc);
      results.push_back(train(model, o, test, stop));
    }
  }
  if (results.empty()) {
    std::printf("stopped before the first step: nothing trained\n");
    return stop.exit_status();
  }

  std::printf("\n%-12s %10s %8s %8s %10s %11s %10s\n", "model", "params", "wall s", "cpu s", "loss",
              "exact match", "char acc");
  for (const Result& r : results)
    std::printf("%-12s %10lld %8.1f %8.1f %10.4f %10.2f%% %9.2f%%\n", r.model.c_str(),
                static_cast<long long>(r.parameters), r.seconds, r.cpu_seconds, r.final_loss,
                100 * r.exact, 100 * r.char_acc);
  std::printf("\nexact match per input format:\n%-26s", "format");
  for (const Result& r : results) std::printf(" %11s", r.model.c_str());
  std::printf("\n");
  for (int f = 0; f < dates::format_count; ++f) {
    std::printf("%-26s", dates::format_names[std::size_t(f)]);
    for (const Result& r : results) std::printf(" %10.1f%%", 100 * r.per_format[std::size_t(f)]);
    std::printf("\n");
  }
  if (stop.requested()) {
    std::printf("\nstopped: %s trained %lld of %lld steps; %zu of %zu models\n",
                results.back().model.c_str(), static_cast<long long>(results.back().steps),
                static_cast<long long>(o.steps), results.size(), o.models.size());
    return stop.exit_status();
  }
  return 0;
}

}  // namespace

// The options, each declared once: checked, with its range, in --help.
void declare_settings(attn::train::Settings& s, Options& o) {
  s.text_list("models", o.models, "models to train, in order")
      .choices({"dot", "bilinear", "additive", "transformer"})
      .at_least(1);
  s.integer("steps", o.steps, "optimizer steps per model").range(1, 10000000);
  s.integer("batch", o.batch, "dates per step").range(1, 4096);
  s.real("lr", o.lr, "peak learning rate (AdamW, warmup + cosine)").range(0, 1);
  s.integer("warmup", o.warmup,
            "warmup steps (at most --steps; the default shrinks to a shorter run)")
      .range(0, 10000000);
  s.unsigned_integer("seed", o.seed, "seed for the weights and the training dates");
  s.integer("threads", o.threads, "OpenMP threads").range(1, 256);
  s.integer("test-size", o.test_size, "held-out test dates").range(10, 1000000);
  s.integer("eval-every", o.eval_every, "print progress every N steps").range(1, 10000000);
  s.integer("show", o.show, "test dates whose alignment is drawn").range(0, 250);
  s.text("out", o.out, "directory for the alignment plots");
  s.flag("overwrite", o.overwrite, "replace the alignment plots of an earlier run in --out");
  s.integer("hidden", o.rnn.hidden, "GRU models: decoder state width H (even)").range(2, 4096);
  s.integer("embed", o.rnn.embed, "GRU models: character embedding width").range(1, 4096);
  s.integer("layers", o.transformer.layers, "transformer: encoder and decoder layers").range(1, 64);
  s.integer("heads", o.transformer.heads, "transformer: heads (divide --d-model)").range(1, 64);
  s.integer("d-model", o.transformer.d_model, "transformer: model width").range(1, 4096);
}

int main(int argc, char** argv) {
  CLI::App app{"seq2seq: encoder-decoders with attention translate dates into ISO 8601"};
  app.footer(
      "Ctrl-C finishes the step, evaluates the model as it is, prints the table of the models "
      "trained so far and exits with status 130.\n"
      "Exit status: 0 done, 1 error, 2 bad option, 130 interrupted.");
  Options o;
  attn::train::Settings settings;
  declare_settings(settings, o);
  examples::add_settings(app, settings);
  return examples::run_main(app, argc, argv, [&] {
    if (o.rnn.hidden % 2 != 0)
      throw CLI::ValidationError("--hidden", std::to_string(o.rnn.hidden) + " is not even");
    if (o.transformer.d_model % o.transformer.heads != 0)
      throw CLI::ValidationError("--heads", std::to_string(o.transformer.heads) +
                                                " does not divide --d-model " +
                                                std::to_string(o.transformer.d_model));
    // A warmup longer than the run: an error when asked for, the whole run when it is the default.
    if (o.warmup > o.steps && settings.given("warmup"))
      throw CLI::ValidationError("--warmup", std::to_string(o.warmup) + " is more than --steps " +
                                                 std::to_string(o.steps) +
                                                 ": the warmup is part of the run");
    o.warmup = std::min(o.warmup, o.steps);
    return run(o);
  });
}
