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
#include <attn/train/paths.hpp>
#include <attn/train/plot.hpp>
#include <attn/train/run_files.hpp>
#include <attn/train/run_lock.hpp>
#include <attn/train/settings.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../char_gpt/tokenizer.hpp"
#include "../common/attention_variants.hpp"
#include "../common/char_checkpoint.hpp"
#include "../common/cli.hpp"
#include "../common/format.hpp"

namespace {

namespace plot = attn::train::plot;

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
  std::vector<index_t> layers;  // the layers whose attention is approximated; empty: all
  bool overwrite = false;
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

// A model loaded from a char_gpt checkpoint with the validation windows it is evaluated on.
template <class Attn>
struct Evaluation {
  nn::GPT<Attn> model;
  std::string attention, label;
  std::string unit;  // what a token is: "characters" or "tokens" (a BPE model's)
  Windows windows;
  index_t dh = 0;

  Evaluation(const EvalOptions& o, const io::Safetensors& file)
      : model(io::get_gpt_config(file, o.checkpoint)),
        attention(io::metadata_string(file, "attention", o.checkpoint)),
        label(o.label.empty() ? attention : o.label),
        dh(model.config().d_model / model.config().heads) {
    attn::set_num_threads(o.threads);
    io::get_parameters(file, model, o.checkpoint);
    model.set_training(false);
    const char_gpt::Tokenizer tok = char_gpt::Tokenizer::from_checkpoint(file, o.checkpoint);
    // The validation split exactly as char_gpt cut it: everything after train_fraction.
    std::vector<std::int32_t> tokens = tok.encode(examples::read_text(o.data));
    const double fraction = io::metadata_double(file, "train.train_fraction", o.checkpoint);
    const auto n_train = std::size_t(double(tokens.size()) * fraction);
    const std::vector<std::int32_t> val(tokens.begin() + std::ptrdiff_t(n_train), tokens.end());
    windows = make_windows(val, model.config().block_size, o.windows, o.batch);
    unit = tok.unit();
  }

  void describe(const EvalOptions& o) const {
    std::printf(
        "value_aware: %s (%s attention), %lld layers, %lld heads of %lld, block %lld; "
        "%zu windows, %lld scored %s, %d threads\n",
        label.c_str(), attention.c_str(), (long long)model.config().layers,
        (long long)model.config().heads, (long long)dh, (long long)model.config().block_size,
        windows.x.size() * std::size_t(o.batch), (long long)windows.scored, unit.c_str(),
        o.threads);
  }
};

template <class Attn>
int evaluate(const EvalOptions& o, const io::Safetensors& file) {
  Evaluation<Attn> ev(o, file);
  auto& model = ev.model;
  const index_t dh = ev.dh, block = model.config().block_size;
  const std::string& label = ev.label;
  const Windows& windows = ev.windows;
  constexpr bool has_probe = approx::approximable<Attn>;
  bool softmax = false;
  if constexpr (has_probe)
    softmax = std::is_same_v<typename std::remove_cvref_t<decltype(model.blocks[0].attn.kernel)>,
                             attn::kernel::Softmax>;
  EvalOptions opts = o;
  if (!has_probe) opts.exact_only = true;
  const auto methods = plan(opts, dh, block, softmax);
  const auto n_layers = index_t(model.blocks.size());
  std::vector<bool> approximated(std::size_t(n_layers), o.layers.empty());
  for (const index_t l : o.layers) {
    ATTN_CHECK(l >= 0 && l < n_layers, attn::value_error, "value_aware eval: --layers ", l,
               " is not a layer of ", o.checkpoint, " (it has ", n_layers, ")");
    approximated[std::size_t(l)] = true;
  }
  ev.describe(o);
  if (!o.layers.empty()) {
    std::printf("approximating layers");
    for (const index_t l : o.layers) std::printf(" %lld", (long long)l);
    std::printf(" only; the others exact\n");
  }
  std::printf("%-22s %8s %9s %11s %10s %8s\n", "method", "keys", "loss", "perplexity", "rel.error",
              "seconds");

  const fs::path out(o.out);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  std::string csv = "model,method,r,mean_keys,loss,perplexity,relative_error,seconds\n";
  for (const approx::Approximation& a : methods) {
    approx::ErrorTally tally;
    tally.first_position = block / 2;  // the scored queries only (make_windows)
    if constexpr (has_probe)
      for (index_t l = 0; l < n_layers; ++l) {
        auto& attention = model.blocks[std::size_t(l)].attn;
        if (approximated[std::size_t(l)])
          approx::approximate(attention, a, &tally);
        else
          approx::approximate(attention, approx::Approximation{});  // exact
      }
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = mean_loss(model, windows);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Exact causal attention: query i of a window sees i + 1 keys; the scored ones are T/2 … T − 1.
    const double keys = a.method == approx::Method::exact
                            ? (double(block / 2 + 1) + double(block)) / 2
                            : tally.mean_keys();
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

// ---- weights: how concentrated a model's attention weights are --------------------------

// Per layer, over every head and scored query (positions T/2 … T − 1 of each window): the largest
// weight, the weight outside the 8 and the d_h + 1 largest (what OVO-8 and OVO-(d_h+1) drop),
// the effective number of keys exp(entropy), the norms of q and k, and the weight outside the
// d_h + 1 largest had q and k been `scale` times longer (the same trained q and k put through
// the kernel at another scale: exp(c² s) for softmax, φ(c·) for elu+1; degree 2 is invariant).
// Under a learned scale g on q and k (linear-scaled), q and k are g q and g k, what φ reads.
constexpr double kScales[] = {0.5, 1, 2, 4};

struct Concentration {
  double rows = 0, top1 = 0, tail8 = 0, tail = 0, effective = 0, q_norm = 0, k_norm = 0;
  double tail_at[std::size(kScales)] = {};
  double check = 0;  // the largest |recomputed − reported| weight at scale 1
};

// Weight outside the r largest of w (a copy is partially sorted).
double tail_mass(std::vector<double> w, index_t r) {
  if (index_t(w.size()) <= r) return 0;
  std::nth_element(w.begin(), w.begin() + r, w.end(), std::greater<>());
  double outside = 0;
  for (auto it = w.begin() + r; it != w.end(); ++it) outside += *it;
  return outside;
}

template <class Kernel>
std::vector<double> weights_at_scale(const attn::AttentionStep<float>& s, index_t b, index_t h,
                                     index_t i, double c) {
  constexpr bool softmax = std::is_same_v<Kernel, attn::kernel::Softmax>;
  const index_t dh = s.q.dim(3), kh = h / (s.q.dim(1) / s.k.dim(1));
  const double feature_in = c * std::pow(double(dh), -0.25);  // ScaledDot's feature input scale
  std::vector<double> w(std::size_t(i + 1));
  for (index_t j = 0; j <= i; ++j) {
    double v = 0;
    if constexpr (std::is_same_v<Kernel, attn::kernel::EluPlusOne>) {
      for (index_t d = 0; d < dh; ++d) {
        const double x = feature_in * s.q(b, h, i, d), y = feature_in * s.k(b, kh, j, d);
        v += (x > 0 ? x + 1 : std::exp(x)) * (y > 0 ? y + 1 : std::exp(y));
      }
    } else {
      for (index_t d = 0; d < dh; ++d) v += double(s.q(b, h, i, d)) * s.k(b, kh, j, d);
      v *= c * c / std::sqrt(double(dh));
      if constexpr (!softmax) v *= v;  // degree 2
    }
    w[std::size_t(j)] = v;
  }
  if constexpr (softmax) {
    const double top = *std::max_element(w.begin(), w.end());
    for (double& v : w) v = std::exp(v - top);
  }
  double total = 0;
  for (const double v : w) total += v;
  for (double& v : w) v /= total;
  return w;
}

template <class Attn>
int concentration(const EvalOptions& o, const io::Safetensors& file) {
  if constexpr (!approx::approximable<Attn>) {
    throw attn::value_error("value_aware weights: " + o.checkpoint +
                            " has no attention probe (Linformer projects keys along time)");
  } else {
    using Kernel = std::remove_cvref_t<decltype(std::declval<Attn&>().kernel)>;
    using Score = std::remove_cvref_t<decltype(std::declval<Attn&>().score)>;
    // A learned scale on q and k (score::HeadScaled) is in the probe's q and k already.
    constexpr bool scaled_dot =
        std::is_same_v<Score, attn::score::ScaledDot> ||
        std::is_same_v<Score, attn::score::HeadScaled<attn::score::ScaledDot>>;
    if constexpr (!scaled_dot || !(std::is_same_v<Kernel, attn::kernel::Softmax> ||
                                   std::is_same_v<Kernel, attn::kernel::EluPlusOne> ||
                                   std::is_same_v<Kernel, attn::kernel::Polynomial<2>>)) {
      throw attn::value_error("value_aware weights: " + o.checkpoint +
                              " is not a scaled dot-product model with the softmax, poly2 or "
                              "elu+1 kernel");
    } else {
      Evaluation<Attn> ev(o, file);
      ev.describe(o);
      const index_t dh = ev.dh;
      std::vector<Concentration> layers(ev.model.blocks.size());
      for (std::size_t l = 0; l < layers.size(); ++l)
        ev.model.blocks[l].attn.probe = [&, l](attn::AttentionStep<float>& s) {
          Concentration& c = layers[l];
          const index_t B = s.q.dim(0), H = s.q.dim(1), T = s.q.dim(2);
          const index_t kh_div = H / s.k.dim(1);
          for (index_t b = 0; b < B; ++b)
            for (index_t h = 0; h < H; ++h)
              for (index_t i = T / 2; i < T; ++i) {
                std::vector<double> w(std::size_t(i + 1));
                double top = 0, entropy = 0, qq = 0, kk = 0;
                for (index_t j = 0; j <= i; ++j) {
                  const double v = s.weights(b, h, i, j);
                  w[std::size_t(j)] = v;
                  top = std::max(top, v);
                  if (v > 0) entropy -= v * std::log(v);
                }
                for (index_t d = 0; d < dh; ++d) {
                  qq += double(s.q(b, h, i, d)) * s.q(b, h, i, d);
                  kk += double(s.k(b, h / kh_div, i, d)) * s.k(b, h / kh_div, i, d);
                }
                c.rows += 1;
                c.top1 += top;
                c.tail8 += tail_mass(w, 8);
                c.tail += tail_mass(w, dh + 1);
                c.effective += std::exp(entropy);
                c.q_norm += std::sqrt(qq);
                c.k_norm += std::sqrt(kk);
                for (std::size_t k = 0; k < std::size(kScales); ++k) {
                  const auto scaled = weights_at_scale<Kernel>(s, b, h, i, kScales[k]);
                  c.tail_at[k] += tail_mass(scaled, dh + 1);
                  if (kScales[k] == 1)
                    for (index_t j = 0; j <= i; ++j)
                      c.check =
                          std::max(c.check, std::abs(scaled[std::size_t(j)] - w[std::size_t(j)]));
                }
              }
        };
      const double loss = mean_loss(ev.model, ev.windows);
      for (auto& b : ev.model.blocks) b.attn.probe = nullptr;
      std::string csv = "model,layer,rows,top1,tail_8,tail_dh1,effective_keys,q_norm,k_norm";
      for (const double c : kScales) csv += ",tail_dh1_scale_" + examples::shortest(c);
      csv += "\n";
      std::printf("loss %.4f; per layer, means over %.0f query rows each:\n", loss, layers[0].rows);
      std::printf("%5s %7s %8s %9s %10s %7s %7s  tail_dh1 at scale 0.5 / 1 / 2 / 4\n", "layer",
                  "top1", "tail_8", "tail_dh1", "eff.keys", "|q|", "|k|");
      for (std::size_t l = 0; l < layers.size(); ++l) {
        const Concentration& c = layers[l];
        ATTN_CHECK(c.check < 1e-3, attn::value_error, "value_aware weights: layer ", l,
                   ": the weights recomputed from q and k differ from the model's by ", c.check,
                   " (the kernel's formula here is not the one the model uses)");
        const double n = c.rows;
        char row[512];
        int len = std::snprintf(row, sizeof row, "%s,%zu,%.0f,%.6f,%.6f,%.6f,%.4f,%.4f,%.4f",
                                ev.label.c_str(), l, n, c.top1 / n, c.tail8 / n, c.tail / n,
                                c.effective / n, c.q_norm / n, c.k_norm / n);
        for (const double t : c.tail_at)
          len += std::snprintf(row + len, sizeof row - std::size_t(len), ",%.6f", t / n);
        csv += std::string(row) + "\n";
        std::printf("%5zu %7.4f %8.4f %9.4f %10.2f %7.2f %7.2f  %.4f / %.4f / %.4f / %.4f\n", l,
                    c.top1 / n, c.tail8 / n, c.tail / n, c.effective / n, c.q_norm / n,
                    c.k_norm / n, c.tail_at[0] / n, c.tail_at[1] / n, c.tail_at[2] / n,
                    c.tail_at[3] / n);
      }
      const fs::path out(o.out);
      if (out.has_parent_path()) fs::create_directories(out.parent_path());
      io::write_file_atomically(out, csv);
      std::printf("wrote %s\n", out.c_str());
      return 0;
    }
  }
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

// The settings of a subcommand that evaluates one model on the validation windows (its lists and
// the checkpoint, a positional argument, are CLI11 options of their own).
void declare_model_settings(attn::train::Settings& s, EvalOptions& o, const std::string& out_help) {
  s.text("data", o.data, "the corpus the model was trained on");
  s.text("out", o.out, out_help);
  s.flag("overwrite", o.overwrite, "replace the --out of an earlier run");
  s.text("label", o.label, "the model's name in the CSV (default: its attention)");
  s.integer("windows", o.windows, "validation windows (stride block/2)").range(1, 1000000);
  s.integer("batch", o.batch, "windows per forward pass").range(1, 4096);
  s.integer("threads", o.threads, "OpenMP threads").range(1, 256);
}

// Before any work: --out can be written, is none of the inputs and holds no earlier result
// (unless --overwrite), checked before anything is written (a refused run leaves no file) and
// again once this process holds <out>.lock (the lock returned, kept until the program ends), so
// that no other process writes the same --out meanwhile.
[[nodiscard]] attn::train::RunLock claim_output(const std::string& out, bool overwrite,
                                                const std::vector<attn::train::Input>& inputs) {
  attn::train::check_output_file(out, "--out", true);
  attn::train::check_not_an_input(out, "--out", inputs);
  auto refuse = [&] {
    attn::train::refuse_to_replace({out}, overwrite, "value_aware", "--out", "move it elsewhere");
  };
  refuse();
  const fs::path path(out);
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  attn::train::RunLock lock(fs::path(out + ".lock"), "value_aware: " + out);
  refuse();  // another run may have written it between the first check and the lock
  return lock;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"value_aware: evaluate char_gpt models with approximate attention"};
  app.require_subcommand(1);
  app.footer(
      "An --out that exists is refused unless --overwrite is given; no --out may be one of the "
      "inputs.\nExit status: 0 done, 1 error, 2 bad option.");
  EvalOptions e;
  attn::train::Settings eval_settings;
  declare_model_settings(eval_settings, e, "CSV to write (one row per approximation)");
  eval_settings.flag("exact-only", e.exact_only, "only the exact model");
  constexpr int most = 1 << 20;
  eval_settings.integer_list("ovo", e.ovo, "r values of the OVO-r curve (d_h + 1 is added)")
      .range(1, most);
  eval_settings.integer_list("ova", e.ova, "r values of the OVA-r heuristic (1 < r <= d_h)")
      .range(2, most);
  eval_settings.integer_list("window", e.window, "sliding-window sizes").range(1, most);
  eval_settings.integer_list("lsh-chunks", e.lsh_chunks, "LSH chunk sizes B (2B keys per round)")
      .range(1, most);
  eval_settings.integer_list("lsh-rounds", e.lsh_rounds, "LSH hash-round counts").range(1, most);
  eval_settings.integer_list("features", e.features, "random-feature counts (softmax models only)")
      .range(1, most);
  eval_settings
      .integer_list("layers", e.layers,
                    "approximate only these layers (0 = the first; default: every layer)")
      .range(0, most);
  CLI::App* eval = app.add_subcommand("eval", "validation loss under each approximation");
  eval->add_option("checkpoint", e.checkpoint, "a char_gpt checkpoint.safetensors")
      ->required()
      ->check(CLI::ExistingFile);
  examples::add_settings(*eval, eval_settings);

  EvalOptions w;
  w.out = "weights.csv";
  w.windows = 32;
  attn::train::Settings weights_settings;
  declare_model_settings(weights_settings, w, "CSV to write (one row per layer)");
  CLI::App* weights_cmd =
      app.add_subcommand("weights", "how concentrated the attention weights are, per layer");
  weights_cmd->add_option("checkpoint", w.checkpoint, "a char_gpt checkpoint.safetensors")
      ->required()
      ->check(CLI::ExistingFile);
  examples::add_settings(*weights_cmd, weights_settings);
  for (CLI::App* cmd : {eval, weights_cmd}) cmd->get_option("--data")->check(CLI::ExistingFile);

  std::vector<std::string> csvs;
  std::string svg = "ovo_curve.svg";
  bool overwrite_svg = false;
  attn::train::Settings plot_settings;
  plot_settings.text("out", svg, "SVG to write");
  plot_settings.flag("overwrite", overwrite_svg, "replace the --out of an earlier run");
  CLI::App* plot_cmd = app.add_subcommand("plot", "OVO-r curves of several eval CSVs");
  plot_cmd->add_option("csv", csvs, "CSVs written by eval")->required()->check(CLI::ExistingFile);
  examples::add_settings(*plot_cmd, plot_settings);

  return examples::run_main(app, argc, argv, [&] {
    if (*plot_cmd) {
      std::vector<attn::train::Input> inputs;
      for (const std::string& c : csvs) inputs.push_back({c, "plot"});
      const attn::train::RunLock lock = claim_output(svg, overwrite_svg, inputs);
      return plot_curves(csvs, svg);
    }
    const EvalOptions& opts = *weights_cmd ? w : e;
    const attn::train::RunLock lock = claim_output(
        opts.out, opts.overwrite, {{opts.checkpoint, "the checkpoint"}, {opts.data, "--data"}});
    const io::Safetensors file = examples::open_checkpoint(opts.checkpoint);
    return examples::with_attention(
        io::metadata_string(file, "attention", opts.checkpoint), [&]<class Attn>() {
          return *weights_cmd ? concentration<Attn>(opts, file) : evaluate<Attn>(opts, file);
        });
  });
}
