// examples/value_aware: the value-aware approximation study on char_gpt models. `eval` loads a
// checkpoint, swaps approximate attention into every layer at evaluation time (OVO-r, OVA-1,
// the OVA-r heuristic, OVA-(d+1) by Carathéodory, sliding window, LSH, random features) and
// writes the validation loss and perplexity of each to a CSV; `plot` draws the OVO-r curves of
// several such CSVs into one SVG.
// Does not train (char_gpt does, e.g. --attention standard / poly2 / linear) nor change weights.
#include <CLI/CLI.hpp>
#include <attn/approx/approx.hpp>
#include <attn/attn.hpp>
#include <attn/data/data.hpp>
#include <attn/io/io.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/attention_variants.hpp"
#include "../common/char_checkpoint.hpp"
#include "../common/cli.hpp"
#include "../common/plot.hpp"
#include "../common/run_files.hpp"

namespace {

namespace fs = std::filesystem;
namespace approx = attn::approx;
namespace io = attn::io;
namespace nn = attn::nn;
using attn::index_t;
using attn::Tensor;

struct EvalOptions {
  std::string checkpoint;
  std::string data = "data/tinyshakespeare.txt";
  std::string out = "value_aware.csv";
  std::string label;  // the model's name in the CSV; default: its attention variant
  index_t windows = 64, batch = 8;
  int threads = 2;
  std::vector<index_t> ovo{1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<index_t> ova{2, 4, 8};  // the heuristic; OVA-1 and OVA-(d+1) always run
  std::vector<index_t> window{8, 32, 64};
  std::vector<index_t> lsh_chunks{8, 32};
  std::vector<index_t> lsh_rounds{1, 4};
  std::vector<index_t> features{32, 128, 512};
  bool exact_only = false;
};

// Validation windows: tokens [s, s + T) predicting [s + 1, s + T + 1), s = 0, T/2, T, …; only
// the last T − T/2 positions of a window are scored, so every scored character has at least T/2
// characters of context (as the study evaluates with a minimum context).
struct Windows {
  std::vector<Tensor<std::int32_t>> x, y;  // batches [b, T]
  index_t scored = 0;
};

Windows make_windows(const std::vector<std::int32_t>& val, index_t block, index_t count,
                     index_t batch) {
  Windows w;
  const index_t stride = block / 2, available = (index_t(val.size()) - block - 1) / stride + 1;
  ATTN_CHECK(available > 0, attn::value_error, "value_aware: the validation split has ", val.size(),
             " characters, fewer than one window of ", block + 1);
  count = std::min(count, available);
  for (index_t start = 0; start < count; start += batch) {
    const index_t n = std::min(batch, count - start);
    Tensor<std::int32_t> x(attn::Shape{n, block}), y(attn::Shape{n, block});
    for (index_t b = 0; b < n; ++b)
      for (index_t i = 0; i < block; ++i) {
        const auto s = std::size_t((start + b) * stride + i);
        x(b, i) = val[s];
        y(b, i) = i < block / 2 ? -100 : val[s + 1];
        if (i >= block / 2) ++w.scored;
      }
    w.x.push_back(std::move(x));
    w.y.push_back(std::move(y));
  }
  return w;
}

template <class Model>
double mean_loss(Model& model, const Windows& w) {
  attn::Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  double total = 0;
  index_t n = 0;
  for (std::size_t i = 0; i < w.x.size(); ++i) {
    tape.clear();
    index_t scored = 0;
    for (const std::int32_t t : w.y[i]) scored += t >= 0;
    total += model.loss(tape, w.x[i], w.y[i]).item() * double(scored);
    n += scored;
  }
  return total / double(n);
}

// The approximations to run for a model whose heads are dh wide, over windows of `block`.
std::vector<approx::Approximation> plan(const EvalOptions& o, index_t dh, index_t block,
                                        bool softmax) {
  using approx::Method;
  std::vector<approx::Approximation> p{{Method::exact}};
  if (o.exact_only) return p;
  std::set<index_t> ovo(o.ovo.begin(), o.ovo.end());
  ovo.insert(dh + 1);
  for (const index_t r : ovo)
    if (r <= block) p.push_back({Method::top_r, r});
  p.push_back({Method::value_aware_1});
  for (const index_t r : o.ova)
    if (r > 1 && r <= dh) p.push_back({Method::value_aware_r, r});
  p.push_back({Method::caratheodory, dh + 1});
  for (const index_t r : o.window) p.push_back({Method::sliding_window, r});
  for (const index_t c : o.lsh_chunks)
    for (const index_t rounds : o.lsh_rounds) {
      approx::Approximation a{Method::lsh, 2 * c};
      a.lsh = approx::LshConfig{c, rounds, 0, 1};
      p.push_back(a);
    }
  if (softmax)
    for (const index_t f : o.features) {
      approx::Approximation a{Method::random_features};
      a.features = f;
      a.seed = 1;
      p.push_back(a);
    }
  return p;
}

template <class Attn>
int evaluate(const EvalOptions& o, const io::Safetensors& file) {
  attn::set_num_threads(o.threads);
  nn::GPT<Attn> model(io::get_gpt_config(file, o.checkpoint));
  io::get_parameters(file, model, o.checkpoint);
  model.set_training(false);
  const std::string attention = io::metadata_string(file, "attention", o.checkpoint);
  const std::string label = o.label.empty() ? attention : o.label;
  const auto tok =
      attn::data::CharTokenizer::from_vocabulary(io::metadata_string(file, "vocab", o.checkpoint));
  // The validation split exactly as char_gpt cut it: everything after train_fraction.
  std::vector<std::int32_t> tokens = tok.encode(examples::read_text(o.data));
  const double fraction = io::metadata_double(file, "train.train_fraction", o.checkpoint);
  const auto n_train = std::size_t(double(tokens.size()) * fraction);
  const std::vector<std::int32_t> val(tokens.begin() + std::ptrdiff_t(n_train), tokens.end());
  const index_t block = model.config().block_size;
  const Windows windows = make_windows(val, block, o.windows, o.batch);

  constexpr bool has_probe = approx::approximable<Attn>;
  index_t dh = model.config().d_model / model.config().heads;
  bool softmax = false;
  if constexpr (has_probe)
    softmax = std::is_same_v<typename std::remove_cvref_t<decltype(model.blocks[0].attn.kernel)>,
                             attn::kernel::Softmax>;
  EvalOptions opts = o;
  if (!has_probe) opts.exact_only = true;
  const auto methods = plan(opts, dh, block, softmax);
  std::printf(
      "value_aware: %s (%s attention), %lld layers, %lld heads of %lld, block %lld; "
      "%zu windows, %lld scored characters, %d threads\n",
      label.c_str(), attention.c_str(), (long long)model.config().layers,
      (long long)model.config().heads, (long long)dh, (long long)block,
      windows.x.size() * std::size_t(o.batch), (long long)windows.scored, o.threads);
  std::printf("%-22s %8s %9s %11s %10s %8s\n", "method", "keys", "loss", "perplexity", "rel.error",
              "seconds");

  const fs::path out(o.out);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  std::string csv = "model,method,r,mean_keys,loss,perplexity,relative_error,seconds\n";
  for (const approx::Approximation& a : methods) {
    approx::ErrorTally tally;
    if constexpr (has_probe)
      for (auto& b : model.blocks) approx::approximate(b.attn, a, &tally);
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = mean_loss(model, windows);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double keys = a.method == approx::Method::exact ? double(block) : tally.mean_keys();
    std::printf("%-22s %8.1f %9.4f %11.3f %10.2e %8.1f\n", a.name().c_str(), keys, loss,
                std::exp(loss), tally.relative_error(), secs);
    std::fflush(stdout);
    char row[256];
    std::snprintf(row, sizeof row, "%s,%s,%lld,%.3f,%.6f,%.4f,%.4e,%.1f\n", label.c_str(),
                  a.name().c_str(), (long long)a.r, keys, loss, std::exp(loss),
                  tally.relative_error(), secs);
    csv += row;
    io::write_file_atomically(out, csv);  // after every method: a partial run keeps its rows
  }
  if constexpr (has_probe)
    for (auto& b : model.blocks) approx::approximate(b.attn, approx::Approximation{});
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

// ---- plot: the OVO-r curves of several eval CSVs ------------------------------------------

struct Row {
  std::string model, method;
  double r = 0, loss = 0;
};

// The rows of a CSV written by eval (model, method, r, mean_keys, loss, ...).
std::vector<Row> read_rows(const std::string& csv) {
  std::ifstream in(csv);
  ATTN_CHECK(in.good(), attn::io_error, "value_aware plot: cannot read ", csv);
  std::string line;
  std::getline(in, line);  // header
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> cells;
    for (std::string cell; std::getline(ls, cell, ',');) cells.push_back(cell);
    ATTN_CHECK(cells.size() == 8, attn::io_error, "value_aware plot: ", csv, ": a row has ",
               cells.size(), " cells, expected 8");
    rows.push_back({cells[0], cells[1], std::stod(cells[2]), std::stod(cells[4])});
  }
  return rows;
}

int plot_curves(const std::vector<std::string>& csvs, const std::string& out) {
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  std::vector<plot::Curve> curves;
  for (std::size_t c = 0; c < csvs.size(); ++c) {
    const auto rows = read_rows(csvs[c]);
    const std::string model = rows.empty() ? csvs[c] : rows.front().model;
    plot::Curve curve{model + " OVO-r", colors[c % 5], {}, {}};
    double exact = std::nan("");
    for (const Row& r : rows) {
      if (r.method.rfind("OVO-", 0) == 0) {
        curve.x.push_back(std::log2(r.r));
        curve.y.push_back(r.loss);
      }
      if (r.method == "exact") exact = r.loss;
    }
    curves.push_back(curve);
    if (!curve.x.empty())
      curves.push_back(
          {model + " exact", colors[c % 5], {curve.x.front(), curve.x.back()}, {exact, exact}});
  }
  plot::write_svg(out, "validation loss of OVO-r (top-r weights) by kernel", "log2 r",
                  "loss (nats / character)", curves);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"value_aware: evaluate char_gpt models with approximate attention"};
  app.require_subcommand(1);
  EvalOptions e;
  CLI::App* eval = app.add_subcommand("eval", "validation loss under each approximation");
  eval->add_option("checkpoint", e.checkpoint, "a char_gpt checkpoint.safetensors")
      ->required()
      ->check(CLI::ExistingFile);
  eval->add_option("--data", e.data, "the corpus the model was trained on")
      ->check(CLI::ExistingFile);
  eval->add_option("--out", e.out, "CSV to write (one row per approximation)");
  eval->add_option("--label", e.label, "the model's name in the CSV (default: its attention)");
  eval->add_option("--windows", e.windows, "validation windows (stride block/2)")
      ->check(CLI::Range(1, 1000000));
  eval->add_option("--batch", e.batch, "windows per forward pass")->check(CLI::Range(1, 4096));
  eval->add_option("--threads", e.threads, "OpenMP threads")->check(CLI::Range(1, 256));
  eval->add_option("--ovo", e.ovo, "r values of the OVO-r curve (d_h + 1 is added)")
      ->delimiter(',');
  eval->add_option("--ova", e.ova, "r values of the OVA-r heuristic (1 < r <= d_h)")
      ->delimiter(',');
  eval->add_option("--window", e.window, "sliding-window sizes")->delimiter(',');
  eval->add_option("--lsh-chunks", e.lsh_chunks, "LSH chunk sizes B (2B keys per round)")
      ->delimiter(',');
  eval->add_option("--lsh-rounds", e.lsh_rounds, "LSH hash-round counts")->delimiter(',');
  eval->add_option("--features", e.features, "random-feature counts (softmax models only)")
      ->delimiter(',');
  eval->add_flag("--exact-only", e.exact_only, "only the exact model");

  std::vector<std::string> csvs;
  std::string svg = "ovo_curve.svg";
  CLI::App* plot_cmd = app.add_subcommand("plot", "OVO-r curves of several eval CSVs");
  plot_cmd->add_option("csv", csvs, "CSVs written by eval")->required()->check(CLI::ExistingFile);
  plot_cmd->add_option("--out", svg, "SVG to write");

  return examples::run_main(app, argc, argv, [&] {
    if (*plot_cmd) {
      examples::check_output_file(svg, "--out", true);
      return plot_curves(csvs, svg);
    }
    examples::check_output_file(e.out, "--out", true);
    const io::Safetensors file = examples::open_checkpoint(e.checkpoint);
    return examples::with_attention(io::metadata_string(file, "attention", e.checkpoint),
                                    [&]<class Attn>() { return evaluate<Attn>(e, file); });
  });
}
