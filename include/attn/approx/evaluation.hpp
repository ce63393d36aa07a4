// attn/approx/evaluation.hpp: approximate attention as a drop-in replacement inside a trained
// model at evaluation time, through MultiHeadAttention's probe: every forward pass under NoGrad
// hands the probe the exact per-head q, k, v, weights and output, and the probe overwrites the
// output with the chosen approximation (and tallies its error).
// Does not train with an approximation (LinformerAttention is trained as a model of its own) and
// runs only where the module materialises the weights, i.e. for evaluation, not for speed.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../attention/multi_head.hpp"
#include "lsh.hpp"
#include "value_aware.hpp"

namespace attn::approx {

enum class Method {
  exact,            // the module's own output (no probe)
  top_r,            // optimal-v-oblivious-r (OVO-r): the r largest weights, renormalised
  value_aware_1,    // optimal-v-aware-1 (OVA-1): the single value closest to the output
  value_aware_r,    // the value_aware_r heuristic (best of OVO-r, OVA-1, refits, greedy)
  caratheodory,     // optimal-v-aware-(d+1): at most d + 1 values, exact output
  sliding_window,   // the r nearest positions (causal masks: the r most recent)
  lsh,              // LSH attention with LshConfig
  random_features,  // Performer/ORF estimate of exp with F features (softmax models only)
};

struct Approximation {
  Method method = Method::exact;
  index_t r = 1;           // keys per query: top_r, value_aware_r, sliding_window
  LshConfig lsh{};         // lsh
  index_t features = 256;  // random_features: F
  std::uint64_t seed = 0;  // random_features: the seed of the random matrix

  // A short label: "exact", "OVO-8", "OVA-1", "OVA-8 (heuristic)", "OVA-(d+1)", "window-8",
  // "LSH B=16 x4", "RF F=64".
  std::string name() const {
    const std::string n = std::to_string(r);
    switch (method) {
      case Method::exact:
        return "exact";
      case Method::top_r:
        return "OVO-" + n;
      case Method::value_aware_1:
        return "OVA-1";
      case Method::value_aware_r:
        return "OVA-" + n + " (heuristic)";
      case Method::caratheodory:
        return "OVA-(d+1)";
      case Method::sliding_window:
        return "window-" + n;
      case Method::lsh:
        return "LSH B=" + std::to_string(lsh.chunk) + " x" + std::to_string(lsh.rounds);
      case Method::random_features:
        return "RF F=" + std::to_string(features);
    }
    return "?";
  }
};

// What a probe replaced: Σ over rows of ‖õ − o‖², of ‖o‖², and of the keys each row used (0 for
// random features, which use every key through features). Accumulated over calls. Rows of query
// positions below `first_position` are replaced but not counted: an evaluation that scores only
// the later positions of a window sets it, so that the keys and errors are those of the scored
// queries (the first positions of a causal window have fewer keys than most approximations keep).
struct ErrorTally {
  index_t first_position = 0;
  double squared_error = 0;
  double squared_norm = 0;
  double keys = 0;
  index_t rows = 0;

  // sqrt(Σ‖õ − o‖² / Σ‖o‖²): the output error relative to the output's size.
  double relative_error() const {
    return squared_norm > 0 ? std::sqrt(squared_error / squared_norm) : 0.0;
  }
  double mean_keys() const { return rows > 0 ? keys / double(rows) : 0.0; }
};

namespace detail {

// The approximation of every row of a step, row-wise from the exact weights and values.
template <class T>
void approximate_rows(const Approximation& a, AttentionStep<T>& step, bool causal, Tensor<T>& out,
                      std::vector<index_t>& used) {
  const Shape& ws = step.weights.shape();
  const index_t B = ws[0], H = ws[1], tq = ws[2], tk = ws[3];
  const index_t hk_count = step.v.shape()[1], dv = step.v.shape()[3], group = H / hk_count;
  std::vector<HeadValues<T>> heads;
  heads.reserve(static_cast<std::size_t>(B * hk_count));
  for (index_t bh = 0; bh < B * hk_count; ++bh)
    heads.emplace_back(step.v.data() + bh * tk * dv, tk, dv);
  const index_t rows = B * H * tq;
  // Checked here, before the parallel loop (an exception must not leave an OpenMP region): a
  // kernel that can make weights negative (an odd polynomial) has no convex combination to
  // approximate.
  for (const T w : step.weights)
    ATTN_CHECK(std::isfinite(static_cast<double>(w)) && w >= T{0}, value_error,
               "approx: ", a.name(),
               " needs attention weights that are finite and >= 0; this "
               "model's include ",
               static_cast<double>(w));
  const double cost = a.method == Method::caratheodory || a.method == Method::value_aware_r
                          ? double(tk) * double(dv) * double(dv)
                          : double(tk) * double(dv);
  parallel_for(rows, cost, [&](index_t row) {
    const index_t i = row % tq, bh = row / tq, b = bh / H, h = bh % H;
    const HeadValues<T>& values = heads[static_cast<std::size_t>(b * hk_count + h / group)];
    const std::span<const T> alpha(step.weights.data() + row * tk, static_cast<std::size_t>(tk));
    Sparse s;
    switch (a.method) {
      case Method::top_r:
        s = top_r(alpha, a.r);
        break;
      case Method::value_aware_1:
        s = value_aware_1(alpha, values,
                          std::span<const T>(step.output.data() + row * dv, std::size_t(dv)));
        break;
      case Method::value_aware_r:
        s = value_aware_r(alpha, values, a.r);
        break;
      case Method::caratheodory:
        s = caratheodory(alpha, values);
        break;
      case Method::sliding_window:
        s = sliding_window_r(alpha, i + tk - tq, a.r, causal ? Window::causal : Window::centered);
        break;
      default:
        break;
    }
    combine(s, values.v, out.data() + row * dv);
    used[static_cast<std::size_t>(row)] = s.size();
  });
}

}  // namespace detail

// A probe that replaces each step's output by approximation `a`, for a module with this score,
// kernel and mask (the mask the module is called with: lsh and random features recompute
// attention from q, k, v under it). With a tally, adds each step's errors to it.
template <ScorePolicy Score, KernelPolicy Kernel, MaskPolicy Mask, class T = float>
AttentionProbe<T> make_probe(const Approximation& a, const Score& score, const Kernel& kernel,
                             const Mask& mask, ErrorTally* tally = nullptr) {
  ATTN_CHECK(a.r >= 1, value_error, "approx::make_probe: r must be >= 1, got ", a.r);
  if (a.method == Method::lsh) {
    a.lsh.validate();
    ATTN_CHECK(!(std::is_same_v<Kernel, kernel::RandomFeatures>), value_error,
               "approx::make_probe: LSH attention scores exact kernels; this model's kernel is "
               "random features (an estimate)");
  }
  if (a.method == Method::random_features) {
    ATTN_CHECK(a.features >= 1, value_error, "approx::make_probe: random features need F >= 1");
    ATTN_CHECK((std::is_same_v<Kernel, kernel::Softmax>), value_error,
               "approx::make_probe: random features estimate the exponential kernel; this model's "
               "kernel is ",
               Kernel::name);
    ATTN_CHECK((std::is_same_v<Score, score::Dot> || std::is_same_v<Score, score::ScaledDot>),
               value_error, "approx::make_probe: random features need a dot-product score, not ",
               Score::name);
  }
  constexpr bool causal =
      std::is_same_v<Mask, mask::Causal> || std::is_same_v<Mask, mask::CausalTopLeft>;
  return [a, score, kernel, mask, tally](AttentionStep<T>& step) {
    if (a.method == Method::exact) return;
    const Shape& os = step.output.shape();
    const index_t rows = os[0] * os[1] * os[2], dv = os[3];
    Tensor<T> out(os);
    std::vector<index_t> used(static_cast<std::size_t>(rows), 0);
    if (a.method == Method::lsh) {
      if constexpr (std::is_same_v<Kernel, kernel::RandomFeatures>)
        throw value_error(
            "approx: LSH attention scores exact kernels; this model's kernel is "
            "random features (an estimate)");
      else
        out = lsh_attention(step.q, step.k, step.v, score, kernel, mask, a.lsh, &used);
    } else if (a.method == Method::random_features) {
      if constexpr (std::is_same_v<Score, score::Dot> || std::is_same_v<Score, score::ScaledDot>) {
        Tape<T> tape;
        NoGrad<T> no_grad(tape);
        const Attention<Score, kernel::RandomFeatures, Mask> op{
            score, kernel::RandomFeatures{a.features, a.seed}, mask};
        out = op(tape.leaf(step.q), tape.leaf(step.k), tape.leaf(step.v)).value();
      }
    } else {
      detail::approximate_rows(a, step, causal, out, used);
    }
    if (tally != nullptr) {
      for (index_t row = 0; row < rows; ++row) {
        if (row % os[2] < tally->first_position) continue;  // a query not scored
        ++tally->rows;
        for (index_t c = 0; c < dv; ++c) {
          const double o = static_cast<double>(step.output[row * dv + c]);
          const double e = static_cast<double>(out[row * dv + c]) - o;
          tally->squared_error += e * e;
          tally->squared_norm += o * o;
        }
        tally->keys += double(used[static_cast<std::size_t>(row)]);
      }
    }
    step.output = std::move(out);
  };
}

// Whether the steps of a module can be approximated: it has a probe, and its probe sees q and k
// under a quadratic score without a position bias (a plain one, or a transformed score's inner
// form on the transformed q, k). Pairwise and key-free scores (no q·k) and ALiBi (a bias the
// approximations would drop) cannot.
template <class Module>
inline constexpr bool approximable = [] {
  if constexpr (requires(Module & m) { m.probe; }) {
    using Score = typename Module::score_type;
    constexpr ScoreForm form = score_form<Score>();
    return (form == ScoreForm::quadratic || form == ScoreForm::transformed) &&
           !HasPositionBias<inner_score_t<Score>>;
  } else {
    return false;
  }
}();

// Installs approximation `a` in a MultiHeadAttention (or any module with a probe, score, kernel
// and mask_type); Method::exact removes the probe. Evaluate under NoGrad with training off.
template <class Module>
void approximate(Module& module, const Approximation& a, ErrorTally* tally = nullptr,
                 const typename Module::mask_type& mask = {}) {
  static_assert(approximable<Module>,
                "attn: approx::approximate needs a module whose probe sees q·k scores without a "
                "position bias (not score::Additive, score::Synthesizer or score::Alibi)");
  using T = typename Module::value_type;
  if (a.method == Method::exact) {
    module.probe = nullptr;
    return;
  }
  using Score = inner_score_t<typename Module::score_type>;
  Score score{};
  if constexpr (std::is_same_v<Score, typename Module::score_type>) score = module.score;
  module.probe = make_probe<Score, std::remove_cvref_t<decltype(module.kernel)>,
                            typename Module::mask_type, T>(a, score, module.kernel, mask, tally);
}

}  // namespace attn::approx
