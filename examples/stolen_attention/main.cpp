// examples/stolen_attention: the hull statistics of trained char_gpt heads. For every model it
// runs held-out sequences through the GPT under attn::NoGrad with MultiHeadAttention's evaluation
// probe, and for every layer, head, sequence and context length L it classifies the keys at
// positions 0..L-1 (what the query at position L-1 sees) with certified_vertices; it writes CSVs
// (one row per query; per token; a summary per model and L) and SVG plots.
// Does not train (examples/stolen_attention/train_models.sh trains the models with char_gpt) and
// does not use Qhull (certified_vertices works for every head dimension).
#include <CLI/CLI.hpp>
#include <attn/analysis/analysis.hpp>
#include <attn/attn.hpp>
#include <attn/data/data.hpp>
#include <attn/io/checkpoint.hpp>
#include <attn/io/io.hpp>
#include <attn/train/paths.hpp>
#include <attn/train/plot.hpp>
#include <attn/train/run_files.hpp>
#include <attn/train/run_lock.hpp>
#include <attn/train/settings.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../char_gpt/tokenizer.hpp"
#include "../common/cli.hpp"

namespace {

namespace plot = attn::train::plot;

namespace fs = std::filesystem;
namespace nn = attn::nn;
namespace io = attn::io;
namespace analysis = attn::analysis;
using attn::index_t;
using attn::Tensor;

// The attention variants of the study, as char_gpt builds them (its --attention standard,
// euclidean and euclidean-scaled; the last one's probe sees q and k divided by d_h^{1/4}).
template <class Score>
using Mha = attn::MultiHeadAttention<Score, attn::kernel::Softmax, attn::mask::Causal,
                                     attn::Heads<attn::dynamic>, attn::projection::Separate, float>;

struct Options {
  std::string data = "data/tinyshakespeare.txt";
  std::vector<std::string> models;  // name=checkpoint
  index_t sequences = 32, batch = 8;
  std::vector<index_t> contexts{8, 16, 32, 64, 128};
  std::uint64_t seed = 7;
  int threads = 1;
  std::string out = "runs/stolen_attention/analysis";
  bool overwrite = false;
};

// One model of the study: its name in the outputs, and its checkpoint.
struct ModelSpec {
  std::string name, path;
};

// "name=checkpoint" for every model, each checked before any is analysed.
std::vector<ModelSpec> model_specs(const std::vector<std::string>& specs) {
  std::vector<ModelSpec> models;
  for (const std::string& spec : specs) {
    const auto eq = spec.find('=');
    ATTN_CHECK(eq != std::string::npos && eq > 0, attn::value_error,
               "stolen_attention: a model is given as name=checkpoint, got '", spec, "'");
    models.push_back({spec.substr(0, eq), spec.substr(eq + 1)});
  }
  return models;
}

// The files a run writes into --out.
const char* const output_names[] = {"queries.csv",
                                    "tokens.csv",
                                    "summary.csv",
                                    "vertex_proportion.svg",
                                    "max_weight_per_token.svg",
                                    "angle_vs_norm_variance.svg"};

// Per model and context length: sums over the queries recorded.
struct Summary {
  index_t queries = 0, interior_wins = 0, with_interior = 0;
  double vertex_proportion = 0, max_vertex = 0, max_interior = 0, angle_var = 0, norm_var = 0;
  double sup_interior = 0;  // the largest weight any interior key received
};

struct ModelResult {
  std::string name, attention;
  index_t d_h = 0;
  std::map<index_t, Summary> by_context;
  analysis::StolenStats stats;
  double certify_seconds = 0;
};

std::string read_text(const std::string& path) {
  const std::vector<std::byte> bytes = io::read_file(path);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

template <class Score>
ModelResult analyse(const Options& o, const std::string& name, const io::Safetensors& file,
                    const std::string& source, const std::string& text, std::string& rows) {
  nn::GPT<Mha<Score>> model(io::get_gpt_config(file, source));
  io::get_parameters(file, model, source);
  model.set_training(false);
  const auto config = model.config();
  const char_gpt::Tokenizer tok = char_gpt::Tokenizer::from_checkpoint(file, source);
  const double train_fraction = io::metadata_double(file, "train.train_fraction", source);
  // The validation split, as char_gpt made it: the text after the first train_fraction.
  const std::vector<std::int32_t> all = tok.encode(text);
  const auto n_train = std::size_t(double(all.size()) * train_fraction);
  const index_t T = config.block_size, n_val = index_t(all.size() - n_train);
  ATTN_CHECK(n_val > T, attn::value_error, "stolen_attention: the validation split of ", o.data,
             " (", n_val, " tokens) is shorter than the block size ", T);
  for (const index_t L : o.contexts)
    ATTN_CHECK(L >= 1 && L <= T, attn::value_error, "stolen_attention: context ", L, " outside 1..",
               T, " (the block size of ", source, ")");

  ModelResult res;
  res.name = name;
  res.attention = io::metadata_string(file, "attention", source);
  res.d_h = config.d_model / config.heads;
  attn::Rng rng(o.seed);
  Tensor<std::int32_t> ids;
  index_t seq0 = 0;
  for (std::size_t l = 0; l < model.blocks.size(); ++l)
    model.blocks[l].attn.probe = [&, l](attn::AttentionStep<float>& s) {
      const index_t B = s.q.dim(0), H = s.q.dim(1);
      for (index_t b = 0; b < B; ++b)
        for (index_t h = 0; h < H; ++h)
          for (const index_t L : o.contexts) {
            const analysis::HeadRecord rec = analysis::head_record(s, ids, b, h, L - 1);
            const auto t0 = std::chrono::steady_clock::now();
            const analysis::ContextStats& c = res.stats.add(rec);
            res.certify_seconds +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            Summary& sum = res.by_context[L];
            ++sum.queries;
            sum.vertex_proportion += c.vertex_proportion;
            sum.max_vertex += c.max_weight_vertex;
            sum.angle_var += c.angle_variance;
            sum.norm_var += c.norm_variance;
            if (c.vertices < c.context) {
              ++sum.with_interior;
              sum.max_interior += c.max_weight_interior;
              sum.sup_interior = std::max(sum.sup_interior, c.max_weight_interior);
              if (c.max_weight_interior > c.max_weight_vertex) ++sum.interior_wins;
            }
            rows += name + "," + res.attention + "," + std::to_string(res.d_h) + "," +
                    std::to_string(l) + "," + std::to_string(h) + "," + std::to_string(seq0 + b) +
                    "," + std::to_string(L) + "," + std::to_string(c.vertices) + "," +
                    fmt(c.vertex_proportion) + "," + fmt(c.max_weight_vertex) + "," +
                    fmt(c.max_weight_interior) + "," + fmt(c.angle_variance) + "," +
                    fmt(c.norm_variance) + "\n";
          }
    };
  attn::Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  for (seq0 = 0; seq0 < o.sequences; seq0 += o.batch) {
    const index_t B = std::min(o.batch, o.sequences - seq0);
    ids = Tensor<std::int32_t>({B, T});
    for (index_t b = 0; b < B; ++b) {
      const auto start = n_train + std::size_t(rng.uniform_int(std::uint64_t(n_val - T)));
      for (index_t t = 0; t < T; ++t) ids(b, t) = all[start + std::size_t(t)];
    }
    tape.clear();
    model(tape, ids);
  }
  return res;
}

int run(const Options& o) {
  // Everything that could lose a result or fail late, checked first: the model list, --out (one
  // owner; its earlier results kept unless --overwrite), no output that is an input.
  const std::vector<ModelSpec> models = model_specs(o.models);
  attn::train::check_writable_directory(o.out, "--out");
  const fs::path out(o.out);
  std::vector<attn::train::Input> inputs{{o.data, "--data"}};
  for (const ModelSpec& m : models) inputs.push_back({m.path, "the checkpoint of " + m.name});
  std::vector<fs::path> outputs;
  for (const char* name : output_names) {
    outputs.push_back(out / name);
    attn::train::check_not_an_input(outputs.back(), "--out", inputs);
  }
  fs::create_directories(out);
  const attn::train::RunLock lock(out / ".lock", "stolen_attention: " + o.out);
  attn::train::refuse_to_replace(outputs, o.overwrite, "stolen_attention", "--out",
                                 "move them elsewhere");
  attn::set_num_threads(o.threads);
  const std::string text = read_text(o.data);
  std::string rows =
      "model,attention,d_h,layer,head,sequence,context,vertices,vertex_proportion,"
      "max_weight_vertex,max_weight_interior,angle_variance,norm_variance\n";
  std::string tokens = "model,token,max_weight_vertex,max_weight_interior,as_vertex,as_interior\n";
  std::string summary =
      "model,attention,d_h,context,queries,mean_vertex_proportion,mean_max_weight_vertex,"
      "mean_max_weight_interior,max_weight_interior,queries_with_interior,interior_wins,"
      "mean_angle_variance,mean_norm_variance\n";
  std::vector<ModelResult> results;
  for (const auto& [name, path] : models) {
    const io::Safetensors file = io::load_safetensors(path);
    const auto fmt_it = file.metadata.find("format");
    ATTN_CHECK(fmt_it != file.metadata.end() && fmt_it->second == "attn.char_gpt.v1",
               attn::io_error, path, ": not a char_gpt checkpoint");
    const std::string attention = io::metadata_string(file, "attention", path);
    const auto t0 = std::chrono::steady_clock::now();
    if (attention == "standard")
      results.push_back(analyse<attn::score::ScaledDot>(o, name, file, path, text, rows));
    else if (attention == "euclidean")
      results.push_back(analyse<attn::score::NegSqEuclidean>(o, name, file, path, text, rows));
    else if (attention == "euclidean-scaled")
      results.push_back(
          analyse<attn::score::ScaledNegSqEuclidean>(o, name, file, path, text, rows));
    else
      throw attn::value_error("stolen_attention: " + path + " uses --attention " + attention +
                              "; only standard, euclidean and euclidean-scaled are analysed");
    const ModelResult& r = results.back();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-12s %-9s d_h %3lld: %6.1f s (%.1f s in certified_vertices)\n", name.c_str(),
                attention.c_str(), (long long)r.d_h, secs, r.certify_seconds);
    std::printf("  %7s %8s %10s %10s %10s %10s %8s %9s %9s\n", "context", "queries", "vert.prop",
                "max w vtx", "max w int", "sup w int", "int wins", "angle var", "norm var");
    for (const auto& [L, s] : r.by_context) {
      // No interior key in any query of this context: the interior columns are NaN.
      const double q = double(s.queries), nan = std::numeric_limits<double>::quiet_NaN();
      const double mean_interior =
          s.with_interior > 0 ? s.max_interior / double(s.with_interior) : nan;
      const double sup_interior = s.with_interior > 0 ? s.sup_interior : nan;
      std::printf("  %7lld %8lld %10.3f %10.3f %10.3f %10.3f %8lld %9.4f %9.4f\n", (long long)L,
                  (long long)s.queries, s.vertex_proportion / q, s.max_vertex / q, mean_interior,
                  sup_interior, (long long)s.interior_wins, s.angle_var / q, s.norm_var / q);
      summary += name + "," + attention + "," + std::to_string(r.d_h) + "," + std::to_string(L) +
                 "," + std::to_string(s.queries) + "," + fmt(s.vertex_proportion / q) + "," +
                 fmt(s.max_vertex / q) + "," + fmt(mean_interior) + "," + fmt(sup_interior) + "," +
                 std::to_string(s.with_interior) + "," + std::to_string(s.interior_wins) + "," +
                 fmt(s.angle_var / q) + "," + fmt(s.norm_var / q) + "\n";
    }
    for (const auto& [id, t] : r.stats.tokens)
      tokens += name + "," + std::to_string(id) + "," + fmt(t.max_weight_vertex) + "," +
                fmt(t.max_weight_interior) + "," + std::to_string(t.as_vertex) + "," +
                std::to_string(t.as_interior) + "\n";
    std::fflush(stdout);
  }
  io::write_file_atomically(out / "queries.csv", rows);
  io::write_file_atomically(out / "tokens.csv", tokens);
  io::write_file_atomically(out / "summary.csv", summary);

  // Plots: vertex proportion vs context; per token, the largest weight received as a vertex and as
  // an interior key (tokens ranked by the first); mean angle variance vs mean norm variance.
  const std::vector<std::string> colors{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                        "#9467bd", "#8c564b", "#e377c2"};
  std::vector<plot::Curve> prop, weight, spread;
  for (std::size_t m = 0; m < results.size(); ++m) {
    const ModelResult& r = results[m];
    const std::string& color = colors[m % colors.size()];
    plot::Curve p{r.name, color, {}, {}}, s{r.name, color, {}, {}};
    for (const auto& [L, sum] : r.by_context) {
      p.x.push_back(double(L)), p.y.push_back(sum.vertex_proportion / double(sum.queries));
      s.x.push_back(sum.norm_var / double(sum.queries));
      s.y.push_back(sum.angle_var / double(sum.queries));
    }
    prop.push_back(p), spread.push_back(s);
    // One x per token, ranked by its largest weight as a vertex (largest first; tokens never a
    // vertex last): a token's vertex and interior points share their x, so the figure pairs them.
    std::vector<std::pair<double, double>> pairs;  // (vertex, interior), NaN where never
    for (const auto& [id, t] : r.stats.tokens)
      pairs.emplace_back(t.max_weight_vertex, t.max_weight_interior);
    std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
      return !std::isnan(a.first) && (std::isnan(b.first) || a.first > b.first);
    });
    plot::Curve v{r.name + " vertex", color, {}, {}}, in{r.name + " interior", "#999999", {}, {}};
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (!std::isnan(pairs[i].first)) v.x.push_back(double(i + 1)), v.y.push_back(pairs[i].first);
      if (!std::isnan(pairs[i].second))
        in.x.push_back(double(i + 1)), in.y.push_back(pairs[i].second);
    }
    weight.push_back(v);
    if (!in.y.empty()) weight.push_back(in);
  }
  plot::write_svg(out / "vertex_proportion.svg", "share of keys that are hull vertices",
                  "context length (keys)", "vertex proportion", prop);
  plot::write_svg(out / "max_weight_per_token.svg",
                  "largest weight per token: as a vertex (colour) / interior (grey)",
                  "token, ranked by its largest weight as a vertex", "max attention weight",
                  weight);
  plot::write_svg(out / "angle_vs_norm_variance.svg",
                  "query-key angle variance vs key norm variance (one point per context)",
                  "mean key norm variance", "mean angle variance (rad^2)", spread);
  std::printf("wrote %s/{queries,tokens,summary}.csv and 3 SVG plots\n", o.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stolen_attention: convex-hull statistics of the heads of trained char_gpt models"};
  app.footer(
      "Writes queries.csv, tokens.csv, summary.csv and three SVG plots into --out; an --out that "
      "holds them is refused unless --overwrite is given.\n"
      "Exit status: 0 done, 1 error, 2 bad option.");
  Options o;
  attn::train::Settings settings;  // the options, each declared once (the models are arguments)
  settings.text("data", o.data, "the corpus the models were trained on");
  settings.integer("sequences", o.sequences, "held-out sequences").range(1, 100000);
  settings.integer("batch", o.batch, "sequences per forward pass").range(1, 4096);
  settings.unsigned_integer("seed", o.seed, "seed for the choice of sequences");
  settings.integer("threads", o.threads, "OpenMP threads").range(1, 256);
  settings.text("out", o.out, "output directory");
  settings.flag("overwrite", o.overwrite, "replace the results of an earlier run in --out");
  settings.integer_list("contexts", o.contexts, "context lengths L (query at position L-1)")
      .range(1, 1 << 20)
      .at_least(1);
  examples::add_settings(app, settings);
  app.get_option("--data")->check(CLI::ExistingFile);
  app.add_option("models", o.models,
                 "name=checkpoint.safetensors (char_gpt, standard/euclidean/euclidean-scaled)")
      ->required();
  return examples::run_main(app, argc, argv, [&] { return run(o); });
}
