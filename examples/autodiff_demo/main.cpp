// examples/autodiff_demo: trains a small MLP to separate two interleaved spirals with attn's
// tape-based autodiff, prints what the tape records, and draws the learned decision regions.
// Deliberately uses only core/ and autodiff/: the model, its parameters and the Adam update are
// written out by hand here (nn/ and optim/ will package them later).
#include <attn/attn.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numbers>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../common/cli.hpp"

namespace {

using attn::index_t;
using attn::Parameter;
using attn::Tape;
using attn::Tensor;
using attn::Var;

// ---- command line ---------------------------------------------------------------------------

struct Options {
  long steps = 800;
  std::uint64_t seed = 1;
};

void print_usage(std::FILE* out, const char* argv0) {
  std::fprintf(
      out,
      "usage: %s [--steps N] [--seed S]\n"
      "  --steps N  training steps (full-batch Adam), 1 <= N <= 1000000 (default 800)\n"
      "  --seed S   seed for the data and the initial weights, 0 <= S < 2^64 (default 1)\n",
      argv0);
}

// Parses all of `text` as an unsigned integer in [lo, hi]; nothing else is accepted.
template <class U>
std::optional<U> parse_number(std::string_view text, U lo, U hi) {
  U value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < lo || value > hi)
    return std::nullopt;
  return value;
}

// Returns the options, or nothing after printing what was wrong (the caller exits with 2).
std::optional<Options> parse_args(int argc, char** argv, bool& help) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help = true;
      return opt;
    }
    if (arg != "--steps" && arg != "--seed") {
      std::fprintf(stderr, "error: unknown argument '%s' (see --help)\n", argv[i]);
      return std::nullopt;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value (see --help)\n", argv[i]);
      return std::nullopt;
    }
    const std::string_view value = argv[++i];
    if (arg == "--steps") {
      const auto n = parse_number<long>(value, 1, 1000000);
      if (!n) {
        std::fprintf(stderr,
                     "error: --steps wants an integer in [1, 1000000], got '%s' (see --help)\n",
                     argv[i]);
        return std::nullopt;
      }
      opt.steps = *n;
    } else {
      const auto s = parse_number<std::uint64_t>(value, 0, UINT64_MAX);
      if (!s) {
        std::fprintf(stderr,
                     "error: --seed wants a non-negative 64-bit integer, got '%s' (see --help)\n",
                     argv[i]);
        return std::nullopt;
      }
      opt.seed = *s;
    }
  }
  return opt;
}

// ---- data -----------------------------------------------------------------------------------

// Two spirals of `per_class` points each, one turned half a circle from the other: a point of
// class c sits at radius t and angle 3.5π t + cπ, with t uniform in [0.08, 1), plus a little
// Gaussian noise. Coordinates lie in about [-1, 1]².
struct Dataset {
  Tensor<float> x;             // [N, 2]
  Tensor<std::int32_t> label;  // [N], 0 or 1
};

Dataset make_spirals(index_t per_class, attn::Rng& rng) {
  Dataset d{Tensor<float>({2 * per_class, 2}), Tensor<std::int32_t>({2 * per_class})};
  for (index_t c = 0; c < 2; ++c)
    for (index_t i = 0; i < per_class; ++i) {
      const double t = 0.08 + 0.92 * rng.uniform();
      const double angle = 3.5 * std::numbers::pi * t + static_cast<double>(c) * std::numbers::pi;
      const index_t row = c * per_class + i;
      d.x(row, 0) = static_cast<float>(t * std::cos(angle) + rng.normal(0.0, 0.015));
      d.x(row, 1) = static_cast<float>(t * std::sin(angle) + rng.normal(0.0, 0.015));
      d.label[row] = static_cast<std::int32_t>(c);
    }
  return d;
}

// ---- model ----------------------------------------------------------------------------------

// logits = tanh(x W1 + b1) W2 + b2: two weight layers with one hidden layer of `hidden` units.
struct Mlp {
  Parameter<float> w1, b1, w2, b2;

  Mlp(index_t hidden, attn::Rng& rng)
      // Wide first-layer weights: each hidden unit becomes a sharp ridge across the plane,
      // and the spirals need many of them.
      : w1(Tensor<float>::randn({2, hidden}, rng, 0.0, 4.0)),
        b1(Tensor<float>::randn({hidden}, rng, 0.0, 1.0)),
        w2(Tensor<float>::randn({hidden, 2}, rng, 0.0,
                                1.0 / std::sqrt(static_cast<double>(hidden)))),
        b2(Tensor<float>::zeros({2})) {}

  // Records the forward pass on `tape` and returns the logits [N, 2].
  Var<float> forward(Tape<float>& tape, const Tensor<float>& x) {
    const Var<float> in = tape.leaf(x);  // an input: copied into the tape, no gradient
    // matmul is a primitive node. `tanh(... + b1)` is an expression template: assigning it to a
    // Var evaluates the add and the tanh in ONE loop into ONE node, and that node's backward
    // applies d tanh and d add per element without storing the pre-activation.
    const Var<float> h = attn::tanh(attn::matmul(in, tape.param(w1)) + tape.param(b1));
    return attn::matmul(h, tape.param(w2)) + tape.param(b2);
  }

  std::vector<Parameter<float>*> parameters() { return {&w1, &b1, &w2, &b2}; }
};

// Adam (Kingma & Ba 2015), written out: m ← β1 m + (1−β1) g, v ← β2 v + (1−β2) g²,
// θ ← θ − lr m̂ / (√v̂ + ε) with the bias corrections m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ).
class Adam {
 public:
  Adam(std::vector<Parameter<float>*> params, double lr) : params_(std::move(params)), lr_(lr) {
    for (const Parameter<float>* p : params_) {
      m_.push_back(Tensor<float>::zeros(p->shape()));
      v_.push_back(Tensor<float>::zeros(p->shape()));
    }
  }

  void step() {
    ++t_;
    const double c1 = 1.0 - std::pow(beta1_, static_cast<double>(t_));
    const double c2 = 1.0 - std::pow(beta2_, static_cast<double>(t_));
    const auto step_size = static_cast<float>(lr_ / c1);
    const auto v_scale = static_cast<float>(1.0 / std::sqrt(c2));
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto theta = params_[i]->value.array();
      const auto g = params_[i]->grad.array();
      auto m = m_[i].array();
      auto v = v_[i].array();
      m = beta1_ * m + (1.0f - beta1_) * g;
      v = beta2_ * v + (1.0f - beta2_) * g.square();
      theta -= step_size * m / (v.sqrt() * v_scale + eps_);
      params_[i]->zero_grad();  // backward() accumulates into grad; start the next step at 0
    }
  }

 private:
  std::vector<Parameter<float>*> params_;
  std::vector<Tensor<float>> m_, v_;
  double lr_;
  float beta1_ = 0.9f, beta2_ = 0.999f, eps_ = 1e-8f;
  long t_ = 0;
};

// The predicted class (argmax of the two logits) for every row of x.
std::vector<int> predict(Mlp& model, Tape<float>& tape, const Tensor<float>& x) {
  tape.clear();
  const attn::NoGrad<float> no_grad(tape);  // evaluation only: nothing saved for backward
  const Var<float> logits = model.forward(tape, x);
  std::vector<int> out(static_cast<std::size_t>(x.dim(0)));
  for (index_t i = 0; i < x.dim(0); ++i)
    out[static_cast<std::size_t>(i)] = logits.value()(i, 1) > logits.value()(i, 0);
  return out;
}

double accuracy(Mlp& model, Tape<float>& tape, const Dataset& data) {
  const std::vector<int> pred = predict(model, tape, data.x);
  index_t correct = 0;
  for (index_t i = 0; i < data.label.numel(); ++i)
    correct += pred[static_cast<std::size_t>(i)] == data.label[i];
  return static_cast<double>(correct) / static_cast<double>(data.label.numel());
}

// Draws the plane [-1.1, 1.1]² as `width` x `height` characters (a character is about twice as
// tall as it is wide): the background shows the predicted class ('.' for 0, ' ' for 1) and the
// training points are drawn on top ('o' for class 0, 'x' for class 1). A point drawn on the
// other class's background is one the model gets wrong.
void plot(Mlp& model, Tape<float>& tape, const Dataset& data, int width, int height) {
  const double lo = -1.1, hi = 1.1;
  Tensor<float> grid({static_cast<index_t>(width) * height, 2});
  for (int r = 0; r < height; ++r)
    for (int c = 0; c < width; ++c) {
      const index_t i = static_cast<index_t>(r) * width + c;
      grid(i, 0) = static_cast<float>(lo + (hi - lo) * (c + 0.5) / width);
      grid(i, 1) = static_cast<float>(hi - (hi - lo) * (r + 0.5) / height);  // row 0 at the top
    }
  const std::vector<int> region = predict(model, tape, grid);
  std::vector<std::string> canvas(static_cast<std::size_t>(height),
                                  std::string(static_cast<std::size_t>(width), ' '));
  for (int r = 0; r < height; ++r)
    for (int c = 0; c < width; ++c)
      canvas[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)] =
          region[static_cast<std::size_t>(r * width + c)] == 0 ? '.' : ' ';
  for (index_t i = 0; i < data.x.dim(0); ++i) {
    const auto c = static_cast<int>(std::floor((data.x(i, 0) - lo) / (hi - lo) * width));
    const auto r = static_cast<int>(std::floor((hi - data.x(i, 1)) / (hi - lo) * height));
    if (c < 0 || c >= width || r < 0 || r >= height) continue;
    canvas[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)] =
        data.label[i] == 0 ? 'o' : 'x';
  }
  std::printf("  +%s+\n", std::string(static_cast<std::size_t>(width), '-').c_str());
  for (const std::string& line : canvas) std::printf("  |%s|\n", line.c_str());
  std::printf("  +%s+\n", std::string(static_cast<std::size_t>(width), '-').c_str());
}

int run(const Options& opt) {
  constexpr index_t kPerClass = 200, kHidden = 64;
  attn::Rng rng(opt.seed);
  const Dataset data = make_spirals(kPerClass, rng);
  Mlp model(kHidden, rng);
  Adam adam(model.parameters(), 0.02);
  Tape<float> tape;

  std::printf(
      "attn autodiff demo: two interleaved spirals, %lld points, seed %llu\n"
      "model: logits = tanh(x W1 + b1) W2 + b2, x [N, 2], W1 [2, %lld], W2 [%lld, 2]\n"
      "each step: tape.clear(), record the forward pass, cross_entropy, tape.backward(loss),\n"
      "then one Adam update of W1, b1, W2, b2 from the gradients backward() accumulated.\n\n",
      static_cast<long long>(data.x.dim(0)), static_cast<unsigned long long>(opt.seed),
      static_cast<long long>(kHidden), static_cast<long long>(kHidden));

  const auto start = std::chrono::steady_clock::now();
  const long report_every = std::max(1L, opt.steps / 10);
  for (long step = 1; step <= opt.steps; ++step) {
    tape.clear();  // forgets last step's nodes but keeps their buffers: no allocation per step
    const Var<float> logits = model.forward(tape, data.x);
    const Var<float> loss = attn::cross_entropy(logits, data.label);  // mean -log p(label)
    tape.backward(loss);
    if (step == 1) {
      std::printf(
          "the tape holds %zu nodes per step: the input leaf, 4 parameters, matmul, the fused\n"
          "tanh(. + b1) node, matmul, the fused `+ b2` node (evaluated by cross_entropy), and\n"
          "cross_entropy. backward() replays them in reverse order.\n\n",
          tape.size());
      std::printf("  step   loss (mean cross-entropy; ln 2 = 0.693 is a coin flip)\n");
    }
    if (step == 1 || step % report_every == 0 || step == opt.steps)
      std::printf("  %5ld  %.4f\n", step, static_cast<double>(loss.item()));
    adam.step();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const double acc = accuracy(model, tape, data);
  std::printf("\ntrained %ld steps in %.2f s; train accuracy %.1f%%\n\n", opt.steps, seconds,
              100.0 * acc);
  std::printf(
      "decision regions ('.' = class 0, ' ' = class 1; points: 'o' class 0, 'x' class 1):\n");
  plot(model, tape, data, 40, 20);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool help = false;
  const std::optional<Options> parsed = parse_args(argc, argv, help);
  if (!parsed) return 2;  // parse_args said what was wrong, in one line
  if (help) {
    print_usage(stdout, argv[0]);
    return 0;
  }
  return examples::guarded([&] { return run(*parsed); });
}
