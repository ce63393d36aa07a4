// examples/positions: self-attention has no notion of order, so a Transformer encoder without
// position vectors computes a permutation-equivariant function. This trains the same encoder with
// sinusoidal, learned and no positions on a task that needs order (reverse a sequence) and one
// that does not (count each token's occurrences), prints the accuracies, checks equivariance of
// the trained models, and shows the position vectors' similarity as terminal heatmaps.
// Does not test extrapolation to longer sequences (learned positions cannot express them).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <span>
#include <string>
#include <vector>

#include <attn/attn.hpp>
#include <attn/train/interrupt.hpp>
#include <attn/train/loop.hpp>
#include <attn/train/plot.hpp>
#include <attn/train/settings.hpp>

#include "../common/cli.hpp"

namespace {

namespace plot = attn::train::plot;

using attn::index_t;
using attn::Tensor;
using attn::Var;
namespace nn = attn::nn;
namespace optim = attn::optim;

using Attention =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::None>;
using Encoder = nn::TransformerEncoder<Attention>;

struct Options {
  index_t length = 10, vocab = 10;
  index_t layers = 2, heads = 4, d_model = 64;
  std::int64_t steps = 800;
  index_t batch = 64;
  double lr = 3e-3;
  std::uint64_t seed = 1;
  int threads = 1;
  index_t test_size = 2000;
  bool scale_embeddings = false;  // token embeddings times √D (Vaswani et al.)
};

enum class Task { reverse, count };
const char* task_name(Task t) {
  return t == Task::reverse ? "reverse" : "count";
}
const char* positions_name(nn::PositionEncoding p) {
  return p == nn::PositionEncoding::sinusoidal ? "sinusoidal"
         : p == nn::PositionEncoding::learned  ? "learned"
                                               : "none";
}

// Random sequences and their targets: reverse: y_i = x_{T−1−i}; count: y_i = #{j : x_j = x_i} − 1.
struct Data {
  Tensor<std::int32_t> x, y;  // [B, T]
};

Data make_data(Task task, index_t batch, const Options& o, attn::Rng& rng) {
  Data d{Tensor<std::int32_t>({batch, o.length}), Tensor<std::int32_t>({batch, o.length})};
  for (index_t b = 0; b < batch; ++b) {
    for (index_t i = 0; i < o.length; ++i)
      d.x(b, i) = std::int32_t(rng.uniform_int(std::uint64_t(o.vocab)));
    for (index_t i = 0; i < o.length; ++i) {
      if (task == Task::reverse) {
        d.y(b, i) = d.x(b, o.length - 1 - i);
      } else {
        std::int32_t n = -1;
        for (index_t j = 0; j < o.length; ++j) n += d.x(b, j) == d.x(b, i);
        d.y(b, i) = n;
      }
    }
  }
  return d;
}

// Encoder + a linear head per position: ids [B, T] -> logits [B, T, classes].
struct Model {
  Encoder encoder;
  nn::Linear<float> head;

  Model(const Options& o, nn::PositionEncoding p, index_t classes, attn::Rng& rng)
      : encoder(config(o, p), rng), head(o.d_model, classes, true, 0.02, rng) {}

  Var<float> operator()(attn::Tape<float>& tape, const Tensor<std::int32_t>& ids) {
    return head(encoder(tape, ids));
  }

  template <class F>
  void for_each_parameter(F&& f) {
    encoder.for_each_parameter(f, "encoder");
    head.for_each_parameter(f, "head");
  }

  static nn::Seq2SeqConfig config(const Options& o, nn::PositionEncoding p) {
    nn::Seq2SeqConfig c;
    c.src_vocab = o.vocab;
    c.src_block = o.length;
    c.encoder_layers = o.layers;
    c.heads = o.heads;
    c.d_model = o.d_model;
    c.positions = p;
    if (o.scale_embeddings) c.init = nn::InitScheme::scaled_embedding;
    return c;
  }
};

struct Accuracy {
  double token = 0, sequence = 0;
};

Accuracy evaluate(Model& m, const Data& d) {
  attn::Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  const Tensor<float> logits = m(tape, d.x).value();
  const index_t B = d.x.shape()[0], T = d.x.shape()[1], C = logits.shape()[2];
  long right = 0, whole = 0;
  for (index_t b = 0; b < B; ++b) {
    bool all = true;
    for (index_t i = 0; i < T; ++i) {
      const float* row = logits.data() + (b * T + i) * C;
      const bool ok = std::int32_t(std::max_element(row, row + C) - row) == d.y(b, i);
      right += ok;
      all = all && ok;
    }
    whole += all;
  }
  return {double(right) / double(B * T), double(whole) / double(B)};
}

// max |f(P x) − P f(x)| over a batch and a random permutation P of the positions.
double equivariance_gap(Model& m, const Data& d, attn::Rng& rng) {
  const index_t B = d.x.shape()[0], T = d.x.shape()[1];
  std::vector<index_t> perm(static_cast<std::size_t>(T));
  for (index_t i = 0; i < T; ++i) perm[std::size_t(i)] = i;
  attn::shuffle(std::span<index_t>(perm), rng);
  Tensor<std::int32_t> px({B, T});
  for (index_t b = 0; b < B; ++b)
    for (index_t i = 0; i < T; ++i) px(b, i) = d.x(b, perm[std::size_t(i)]);
  attn::Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  const Tensor<float> y = m(tape, d.x).value(), yp = m(tape, px).value();
  const index_t C = y.shape()[2];
  double gap = 0;
  for (index_t b = 0; b < B; ++b)
    for (index_t i = 0; i < T; ++i)
      for (index_t c = 0; c < C; ++c)
        gap = std::max(gap, double(std::abs(yp(b, i, c) - y(b, perm[std::size_t(i)], c))));
  return gap;
}

// Cosine similarity of the position vectors p_i, p_j mapped from [−1, 1] to [0, 1].
plot::Heatmap position_similarity(const Tensor<float>& table, index_t T) {
  const index_t D = table.shape()[1];
  plot::Heatmap h{{}, std::size_t(T), std::size_t(T), {}, {}};
  for (index_t i = 0; i < T; ++i) {
    h.row_labels.push_back("p" + std::to_string(i));
    h.col_labels.push_back(std::to_string(i));
    for (index_t j = 0; j < T; ++j) {
      double dot = 0, ni = 0, nj = 0;
      for (index_t k = 0; k < D; ++k) {
        dot += double(table(i, k)) * table(j, k);
        ni += double(table(i, k)) * table(i, k);
        nj += double(table(j, k)) * table(j, k);
      }
      h.values.push_back(0.5 * (1 + dot / std::sqrt(ni * nj)));
    }
  }
  return h;
}

struct Row {
  std::string task, positions;
  Accuracy acc;
  double gap = 0, seconds = 0, cpu_seconds = 0;  // wall clock and this process's CPU time
  std::int64_t steps = 0;  // trained: --steps, or fewer when a signal stopped the run
};

// Trains one model (fewer steps when a signal stops it: Row::steps) and evaluates it.
Row train(Task task, nn::PositionEncoding p, const Options& o, const Data& test,
          const attn::train::StopRequest& stop) {
  attn::Rng rng(o.seed);
  const index_t classes = task == Task::reverse ? o.vocab : o.length;
  Model model(o, p, classes, rng);
  auto params = optim::parameters_of<float>(model);
  optim::AdamW<float> opt(params, {.lr = o.lr, .beta1 = 0.9, .beta2 = 0.98, .weight_decay = 0.01});
  const optim::WarmupCosine schedule{o.lr, o.lr / 10, std::min<std::int64_t>(100, o.steps / 10),
                                     o.steps};
  attn::Tape<float> tape;
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  // A step's batch depends only on (seed, step).
  const auto step = [&](std::int64_t s) {
    attn::Rng batch_rng(o.seed * 1000003 + std::uint64_t(s));
    const Data d = make_data(task, o.batch, o, batch_rng);
    opt.zero_grad();
    tape.clear();
    const Var<float> loss = attn::cross_entropy(model(tape, d.x), d.y);
    tape.backward(loss);
    const double norm = optim::clip_grad_norm(params, 1.0);
    opt.set_lr(schedule(s));
    opt.step();
    return optim::StepResult{loss.item(), norm};
  };
  const attn::train::LoopEnd ran =
      attn::train::run_loop({0, o.steps, o.steps, double(o.batch * o.length)}, stop, step,
                            [](const attn::train::StepReport&) {});
  Row r{task_name(task), positions_name(p), evaluate(model, test), 0,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  r.steps = ran.steps_done;
  r.cpu_seconds = double(std::clock() - c0) / CLOCKS_PER_SEC;
  attn::Rng perm_rng(o.seed + 17);
  r.gap = equivariance_gap(model, test, perm_rng);
  if (task == Task::reverse && p == nn::PositionEncoding::learned)
    std::printf(
        "\nlearned positions after training, cosine similarity of p_i and p_j "
        "(blank -1, @ +1):\n%s",
        plot::ascii_heatmap(position_similarity(model.encoder.embed.pos_emb.weight.value, o.length))
            .c_str());
  std::printf(
      "%-8s %-11s token %6.2f%%  sequence %6.2f%%  |f(Px) - Pf(x)| %.1e  %5.1f s wall, "
      "%5.1f s cpu\n",
      r.task.c_str(), r.positions.c_str(), 100 * r.acc.token, 100 * r.acc.sequence, r.gap,
      r.seconds, r.cpu_seconds);
  std::fflush(stdout);
  return r;
}

}  // namespace

// The options, each declared once: checked, with its range, in --help.
void declare_settings(attn::train::Settings& s, Options& o) {
  s.integer("length", o.length, "sequence length T").range(2, 256);
  s.integer("vocab", o.vocab, "token values").range(2, 1000);
  s.integer("layers", o.layers, "encoder layers").range(1, 32);
  s.integer("heads", o.heads, "heads (divide --d-model)").range(1, 64);
  s.integer("d-model", o.d_model, "model width").range(2, 4096);
  s.integer("steps", o.steps, "optimizer steps per model").range(1, 10000000);
  s.integer("batch", o.batch, "sequences per step").range(1, 4096);
  s.real("lr", o.lr, "peak learning rate").range(0, 1);
  s.unsigned_integer("seed", o.seed, "seed for weights and data");
  s.integer("threads", o.threads, "OpenMP threads").range(1, 256);
  s.integer("test-size", o.test_size, "test sequences").range(1, 1000000);
  s.flag("scale-embeddings", o.scale_embeddings,
         "multiply token embeddings by sqrt(d_model), as Vaswani et al. do");
}

int main(int argc, char** argv) {
  CLI::App app{"positions: sinusoidal vs learned vs no position vectors in a Transformer encoder"};
  app.footer(
      "Ctrl-C finishes the step, evaluates the model in training as it is, prints the table of "
      "the models so far and exits with status 130.\n"
      "Exit status: 0 done, 1 error, 2 bad option, 130 interrupted.");
  Options o;
  attn::train::Settings settings;
  declare_settings(settings, o);
  examples::add_settings(app, settings);
  return examples::run_main(app, argc, argv, [&] {
    if (o.d_model % o.heads != 0)
      throw CLI::ValidationError(
          "--heads",
          std::to_string(o.heads) + " does not divide --d-model " + std::to_string(o.d_model));
    const attn::train::StopRequest stop;
    attn::set_num_threads(o.threads);
    std::printf(
        "sinusoidal position vectors, cosine similarity of p_i and p_j (blank -1, @ +1):\n%s",
        plot::ascii_heatmap(
            position_similarity(nn::sinusoidal_positions<float>(o.length, o.d_model), o.length))
            .c_str());
    std::printf(
        "\nT = %lld tokens from %lld values, %lld steps of %lld sequences per model, token "
        "embeddings ~ N(0, 0.02^2)%s\n",
        static_cast<long long>(o.length), static_cast<long long>(o.vocab),
        static_cast<long long>(o.steps), static_cast<long long>(o.batch),
        o.scale_embeddings ? " times sqrt(d_model)" : "");
    std::printf(
        "reverse: y_i = x_(T-1-i) needs order; count: y_i = occurrences of x_i does not\n\n");
    std::fflush(stdout);
    // Each model in turn; a signal stops the one training after its step (it is evaluated as it
    // is) and the models after it are not trained.
    std::vector<Row> rows;
    for (const Task task : {Task::reverse, Task::count}) {
      attn::Rng test_rng(o.seed + 99);
      const Data test = make_data(task, o.test_size, o, test_rng);
      for (const nn::PositionEncoding p :
           {nn::PositionEncoding::sinusoidal, nn::PositionEncoding::learned,
            nn::PositionEncoding::none})
        if (!stop.requested()) rows.push_back(train(task, p, o, test, stop));
    }
    if (rows.empty()) {
      std::printf("stopped before the first step: nothing trained\n");
      return stop.exit_status();
    }
    std::printf("\n%-8s %-11s %9s %9s %15s\n", "task", "positions", "token", "sequence",
                "|f(Px)-Pf(x)|");
    for (const Row& r : rows)
      std::printf("%-8s %-11s %8.2f%% %8.2f%% %15.1e\n", r.task.c_str(), r.positions.c_str(),
                  100 * r.acc.token, 100 * r.acc.sequence, r.gap);
    if (stop.requested()) {
      std::printf("\nstopped: %s/%s trained %lld of %lld steps; %zu of 6 models\n",
                  rows.back().task.c_str(), rows.back().positions.c_str(),
                  static_cast<long long>(rows.back().steps), static_cast<long long>(o.steps),
                  rows.size());
      return stop.exit_status();
    }
    return 0;
  });
}
