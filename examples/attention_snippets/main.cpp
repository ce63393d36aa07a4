// attention_snippets: every code example of docs/attention.md, compiled and run, one line each.
// Does not teach by itself: read docs/attention.md; each block between `// [doc:name]` and
// `// [end]` below is the block of the same name there, verbatim (run scripts in the README).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <attn/attention/multi_head.hpp>  // Attention, the policies, MultiHeadAttention
#include <attn/attention/reference.hpp>   // reference_attention, the oracle

namespace {

// [doc:setup]
// A tape leaf filled with N(0, 1) numbers, and the mean |a − b| of two tensors (the largest is
// attn::max_abs_diff).
attn::Var<float> randn(attn::Tape<float>& tape, attn::Rng& rng, const attn::Shape& shape,
                       bool requires_grad = false) {
  return tape.leaf(attn::Tensor<float>::randn(shape, rng), requires_grad);
}

double mean_abs_diff(const attn::Tensor<float>& a, const attn::Tensor<float>& b) {
  double s = 0;
  for (attn::index_t i = 0; i < a.numel(); ++i) s += std::abs(a[i] - b[i]);
  return s / static_cast<double>(a.numel());
}
// [end]

bool all_finite(const attn::Tensor<float>& t) {
  return std::all_of(t.begin(), t.end(), [](float x) { return std::isfinite(x); });
}

void quick_start() {
  // [doc:quick_start]
  attn::Rng rng(1);
  attn::Tape<float> tape;
  attn::Var<float> q = randn(tape, rng, {2, 4, 16, 8});                 // [B, H, Tq, Dh]
  attn::Var<float> k = randn(tape, rng, {2, 4, 16, 8});                 // [B, Hk, Tk, Dh]
  attn::Var<float> v = randn(tape, rng, {2, 4, 16, 8});                 // [B, Hk, Tk, Dv]
  attn::Var<float> o = attn::attention(q, k, v, attn::mask::Causal{});  // [B, H, Tq, Dv]
  // [end]
  std::printf("quick_start: causal softmax attention, output %s\n", o.shape().str().c_str());
}

void scores() {
  attn::Rng rng(2);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {1, 2, 8, 4});
  const attn::Var<float> k = randn(tape, rng, {1, 2, 8, 4});
  const attn::Var<float> v = randn(tape, rng, {1, 2, 8, 4});
  // [doc:scores]
  attn::Var<float> o_dot = attn::attention<attn::score::Dot>(q, k, v);           // q·k
  attn::Var<float> o_scaled = attn::attention<attn::score::ScaledDot>(q, k, v);  // q·k/√d
  attn::Tensor<float> w;  // the weights, to compare with the literal −‖q − k‖²
  attn::Var<float> o_dist = attn::attention<attn::score::NegSqEuclidean>(q, k, v, {}, &w);
  auto ref = attn::reference_attention<attn::score::NegSqEuclidean, attn::kernel::Softmax,
                                       attn::mask::None>(q.value(), k.value(), v.value());
  std::printf("scores: NegSqEuclidean fused vs literal -|q-k|^2: weights differ by %.1e\n",
              attn::max_abs_diff(w, ref.weights));
  // [end]
  (void)o_dot;
  (void)o_scaled;
  (void)o_dist;
}

void kernels() {
  attn::Rng rng(3);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {1, 2, 32, 16});
  const attn::Var<float> k = randn(tape, rng, {1, 2, 32, 16});
  const attn::Var<float> v = randn(tape, rng, {1, 2, 32, 16});
  // [doc:kernels]
  using attn::score::ScaledDot;
  attn::Attention<ScaledDot, attn::kernel::Softmax> softmax;           // κ = exp(s), the default
  attn::Attention<ScaledDot, attn::kernel::Polynomial<2>> quadratic;   // κ = s²
  attn::Attention<ScaledDot, attn::kernel::EluPlusOne> linear;         // φ(x) = elu(x) + 1
  attn::Attention<attn::score::Dot, attn::kernel::Relu> relu;          // φ(x) = max(x, 0)
  attn::Attention<ScaledDot, attn::kernel::RandomFeatures> performer;  // φ·φ ≈ exp(q·k/√d)
  performer.kernel = {.features = 1024, .seed = 7};
  const attn::Var<float> exact = softmax(q, k, v);
  const attn::Var<float> estimate = performer(q, k, v);
  std::printf("kernels: RandomFeatures (F = 1024) vs exact softmax: mean |diff| = %.3f\n",
              mean_abs_diff(estimate.value(), exact.value()));
  // [end]
  (void)quadratic(q, k, v);
  (void)linear(q, k, v);
  (void)relu(q, k, v);
}

void masks() {
  attn::Rng rng(4);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {2, 2, 16, 8});
  const attn::Var<float> k = randn(tape, rng, {2, 2, 16, 8});
  const attn::Var<float> v = randn(tape, rng, {2, 2, 16, 8});
  // [doc:masks]
  attn::mask::None all;                                 // every query sees every key
  attn::mask::Causal causal;                            // key j <= i + (Tk − Tq): end-aligned
  attn::mask::CausalTopLeft top_left;                   // key j <= i: start-aligned
  auto recent = attn::mask::SlidingWindow::causal(4);   // the 4 latest keys, itself included
  auto band = attn::mask::SlidingWindow::symmetric(2);  // |p − j| <= 2
  attn::mask::SlidingWindow skewed{.before = 3, .after = 1};
  attn::mask::Padding padding({16, 11});  // batch entry 1 has 11 real keys, then padding
  attn::mask::LeftPadding left({5, 0});   // batch entry 0 has 5 padding keys, then real ones
  attn::Tensor<std::uint8_t> allowed(attn::Shape{16, 16});  // [Tq, Tk], 1 = may attend
  for (attn::index_t i = 0; i < 16; ++i)
    for (attn::index_t j = 0; j <= i; j += 2) allowed(i, j) = 1;  // every other past key
  attn::mask::Custom custom(allowed);  // or one matrix per batch entry: [B, Tq, Tk]
  attn::mask::BigBird bigbird{.block = 4, .window = 1, .global = 1, .random = 1, .seed = 3};
  attn::mask::And causal_prompts{causal, left};     // both allow: a left-padded causal batch
  attn::mask::Or window_or_custom{recent, custom};  // either allows
  attn::Var<float> o = attn::attention(q, k, v, bigbird);
  // [end]
  (void)attn::attention(q, k, v, all);
  (void)attn::attention(q, k, v, causal);
  (void)attn::attention(q, k, v, top_left);
  (void)attn::attention(q, k, v, recent);
  (void)attn::attention(q, k, v, band);
  (void)attn::attention(q, k, v, skewed);
  (void)attn::attention(q, k, v, padding);
  (void)attn::attention(q, k, v, left);
  (void)attn::attention(q, k, v, custom);
  (void)attn::attention(q, k, v, causal_prompts);
  (void)attn::attention(q, k, v, window_or_custom);
  std::printf("masks: 12 masks built and used, e.g. BigBird output %s\n", o.shape().str().c_str());
}

void causal_alignment() {
  // [doc:causal_alignment]
  const attn::index_t Tq = 2, Tk = 5;  // 2 new queries, 5 keys (3 cached + 2 new)
  for (attn::index_t i = 0; i < Tq; ++i) {
    std::printf("causal_alignment: query %d sees  Causal: ", static_cast<int>(i));
    for (attn::index_t j = 0; j < Tk; ++j)
      std::printf("%c", attn::mask::Causal{}.allowed(0, i, j, Tq, Tk) ? 'x' : '.');
    std::printf("  CausalTopLeft: ");
    for (attn::index_t j = 0; j < Tk; ++j)
      std::printf("%c", attn::mask::CausalTopLeft{}.allowed(0, i, j, Tq, Tk) ? 'x' : '.');
    std::printf("\n");
  }
  // [end]
}

void left_padding() {
  attn::Rng rng(11);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {2, 1, 5, 8});
  const attn::Var<float> k = randn(tape, rng, {2, 1, 5, 8});
  const attn::Var<float> v = randn(tape, rng, {2, 1, 5, 8});
  // [doc:left_padding]
  // Prompts of 3 and 5 tokens, left-padded to 5 so that generation appends to both at once.
  const attn::mask::And prompts{attn::mask::Causal{}, attn::mask::LeftPadding({2, 0})};
  attn::Var<float> o = attn::attention(q, k, v, prompts);  // [2, 1, 5, 8]
  for (attn::index_t i = 0; i < 5; ++i) {
    std::printf("left_padding: prompt 0, query %d sees ", static_cast<int>(i));
    for (attn::index_t j = 0; j < 5; ++j)
      std::printf("%c", prompts.allowed(0, i, j, 5, 5) ? 'x' : '.');
    std::printf("\n");
  }
  // [end]
  // Prompt 0 alone (its 3 real tokens, plain Causal) gives the same rows.
  attn::Tensor<float> q0({1, 1, 3, 8}), k0({1, 1, 3, 8}), v0({1, 1, 3, 8});
  for (attn::index_t t = 0; t < 3; ++t)
    for (attn::index_t d = 0; d < 8; ++d) {
      q0(0, 0, t, d) = q.value()(0, 0, t + 2, d);
      k0(0, 0, t, d) = k.value()(0, 0, t + 2, d);
      v0(0, 0, t, d) = v.value()(0, 0, t + 2, d);
    }
  const attn::Var<float> alone =
      attn::attention(tape.leaf(q0), tape.leaf(k0), tape.leaf(v0), attn::mask::Causal{});
  double diff = 0;
  for (attn::index_t t = 0; t < 3; ++t)
    for (attn::index_t d = 0; d < 8; ++d)
      diff =
          std::max(diff, double(std::abs(o.value()(0, 0, t + 2, d) - alone.value()(0, 0, t, d))));
  std::printf("left_padding: prompt 0 padded vs alone: max |diff| = %.1e\n", diff);
}

void empty_rows() {
  attn::Rng rng(5);
  // [doc:empty_rows]
  attn::Tape<float> tape;
  attn::Var<float> q = randn(tape, rng, {2, 1, 4, 8}, /*requires_grad=*/true);
  attn::Var<float> k = randn(tape, rng, {2, 1, 4, 8}, true);
  attn::Var<float> v = randn(tape, rng, {2, 1, 4, 8}, true);
  attn::mask::Padding no_keys({0, 4});  // batch entry 0: every key is padding
  attn::Var<float> o = attn::attention(q, k, v, no_keys);
  tape.backward(attn::sum(o));
  // In batch entry 0, o and the gradients of q, k, v are 0; nothing is NaN.
  // [end]
  bool zero = true;
  for (attn::index_t i = 0; i < 4 * 8; ++i)
    zero = zero && o.value()[i] == 0.0f && q.grad()[i] == 0.0f && k.grad()[i] == 0.0f;
  std::printf("empty_rows: fully masked rows give output 0 and gradient 0: %s, all finite: %s\n",
              zero ? "yes" : "NO",
              all_finite(o.value()) && all_finite(q.grad()) && all_finite(v.grad()) ? "yes" : "NO");
}

void weights() {
  attn::Rng rng(6);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {1, 2, 6, 4});
  const attn::Var<float> k = randn(tape, rng, {1, 2, 6, 4});
  const attn::Var<float> v = randn(tape, rng, {1, 2, 6, 4});
  // [doc:weights]
  attn::Tensor<float> w;  // receives [B, H, Tq, Tk]; each allowed row sums to 1
  attn::Var<float> o = attn::attention(q, k, v, attn::mask::Causal{}, &w);
  std::printf("weights: w%s, w(0, 0, 2, :) = %.3f %.3f %.3f %.3f (masked)\n",
              w.shape().str().c_str(), w(0, 0, 2, 0), w(0, 0, 2, 1), w(0, 0, 2, 2), w(0, 0, 2, 3));
  // [end]
  (void)o;
}

void partials() {
  attn::Rng rng(13);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {1, 2, 8, 4});
  const attn::Var<float> k1 = randn(tape, rng, {1, 2, 150, 4}),
                         v1 = randn(tape, rng, {1, 2, 150, 4});
  const attn::Var<float> k2 = randn(tape, rng, {1, 2, 50, 4}), v2 = randn(tape, rng, {1, 2, 50, 4});
  // [doc:partials]
  // Keys and values in two chunks: each chunk's partial, merged, is the attention over both.
  attn::Attention<attn::score::ScaledDot> op;
  attn::AttentionPartial<float> a = op.partial(q, k1, v1), b = op.partial(q, k2, v2);
  attn::AttentionPartial<float> ab = attn::merge_attention(a, b);  // exact, differentiable
  attn::Var<float> whole = op(q, attn::concat({k1, k2}, 2), attn::concat({v1, v2}, 2));
  std::printf("partials: lse%s, max |merged - whole| = %.1e\n", ab.lse.shape().str().c_str(),
              attn::max_abs_diff(ab.output.value(), whole.value()));
  // [end]
}

void learned_biases() {
  attn::Rng rng(14);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {2, 4, 64, 8}), k = randn(tape, rng, {2, 4, 64, 8}),
                         v = randn(tape, rng, {2, 4, 64, 8});
  // [doc:learned_biases]
  // T5's relative-position buckets: a table [H, 32] that the loss trains like any parameter.
  attn::Var<float> table = tape.leaf(attn::Tensor<float>(attn::Shape{4, 32}), true);
  attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal> op;
  attn::Var<float> o = op(q, k, v, attn::t5_relative_bias(table, /*bidirectional=*/false));
  tape.backward(attn::sum(o * o));
  std::printf("learned_biases: d table%s; head 0, bucket 0 (the query's own position): %.3f\n",
              table.grad().shape().str().c_str(), table.grad()(0, 0));
  // [end]
}

void paths() {
  attn::Rng rng(7);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {1, 2, 100, 8});
  const attn::Var<float> k = randn(tape, rng, {1, 2, 100, 8});
  const attn::Var<float> v = randn(tape, rng, {1, 2, 100, 8});
  // [doc:paths]
  using attn::score::ScaledDot;
  using Linear = attn::Attention<ScaledDot, attn::kernel::EluPlusOne, attn::mask::Causal>;
  using Banded = attn::Attention<ScaledDot, attn::kernel::EluPlusOne, attn::mask::SlidingWindow>;
  static_assert(Linear::linear_path);   // O(T): prefix sums, no T x T matrix
  static_assert(!Banded::linear_path);  // materialised φ(q)·φ(k)

  attn::Attention<ScaledDot, attn::kernel::Softmax, attn::mask::Causal> fused;
  std::printf("paths: online softmax vs materialised: max |diff| = %.1e\n",
              attn::max_abs_diff(fused(q, k, v).value(), fused.materialized(q, k, v).value()));
  // [end]
}

void grouped_query() {
  attn::Rng rng(8);
  // [doc:grouped_query]
  attn::Tape<float> tape;
  attn::Var<float> q = randn(tape, rng, {1, 8, 16, 8});  // 8 query heads
  attn::Var<float> k = randn(tape, rng, {1, 2, 16, 8});  // 2 key/value heads:
  attn::Var<float> v = randn(tape, rng, {1, 2, 16, 8});  // heads 0-3 read 0, heads 4-7 read 1
  attn::Var<float> o = attn::attention(q, k, v, attn::mask::Causal{});  // [1, 8, 16, 8]
  // [end]
  std::printf("grouped_query: 8 query heads over 2 key/value heads, output %s\n",
              o.shape().str().c_str());
}

void dropout() {
  attn::Rng rng(9);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {1, 2, 16, 8});
  const attn::Var<float> k = randn(tape, rng, {1, 2, 16, 8});
  const attn::Var<float> v = randn(tape, rng, {1, 2, 16, 8});
  const std::uint64_t step = 42;
  // [doc:dropout]
  attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal> op;
  op.dropout = {.p = 0.1, .seed = step};  // a new seed per training step
  const attn::Var<float> a = op(q, k, v);
  const attn::Var<float> b = op(q, k, v);  // same seed: the same weights are dropped
  op.dropout = {};                         // p = 0: off (evaluation)
  // [end]
  std::printf("dropout: same seed, same result: %s; without dropout differs by %.3f\n",
              attn::max_abs_diff(a.value(), b.value()) == 0.0 ? "yes" : "NO",
              attn::max_abs_diff(a.value(), op(q, k, v).value()));
}

void self_attention() {
  // [doc:self_attention]
  using Mha = attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax,
                                       attn::mask::Causal, attn::Heads<4>>;
  Mha mha({.d_model = 32, .dropout = 0.1, .seed = 1});  // 4 heads of width 8

  attn::Rng rng(10);
  attn::Tape<float> tape;
  attn::Var<float> x = randn(tape, rng, {2, 16, 32});  // [B, T, D]
  attn::Var<float> y = mha(x);                         // [B, T, D], causal
  tape.backward(attn::mean(y * y));                    // gradients land in the parameters
  std::string names;  // q_proj.weight [32, 32], q_proj.bias [32], k_proj.weight, ...
  mha.for_each_parameter([&](const std::string& name, attn::Parameter<float>& p) {
    names += " " + name + p.shape().str();
  });
  std::printf("self_attention: parameters%s\n", names.c_str());
  mha.training = false;  // no dropout from here on
  // [end]
}

void heads_and_projections() {
  // [doc:heads_and_projections]
  using attn::dynamic;
  using attn::Heads;
  using attn::kernel::Softmax;
  using attn::mask::None;
  using attn::score::ScaledDot;
  attn::MultiHeadAttention<> standard({.d_model = 64, .heads = 8});  // Heads<dynamic>
  attn::MultiHeadAttention<> gqa({.d_model = 64, .heads = 8, .kv_heads = 2});
  attn::MultiHeadAttention<ScaledDot, Softmax, None, Heads<dynamic>, attn::projection::Tied> tied(
      {.d_model = 64, .heads = 8});  // W_Q = W_K: symmetric scores

  auto count = [](auto& m) {
    attn::index_t n = 0;
    m.for_each_parameter(
        [&](const std::string&, attn::Parameter<float>& p) { n += p.value.numel(); });
    return static_cast<long long>(n);
  };
  std::printf("heads_and_projections: parameters: separate %lld, kv_heads = 2 %lld, tied %lld\n",
              count(standard), count(gqa), count(tied));
  // [end]
}

void cross_attention() {
  attn::Rng rng(11);
  attn::Tape<float> tape;
  attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Padding> mha(
      {.d_model = 32, .heads = 4});
  // [doc:cross_attention]
  attn::Var<float> x = randn(tape, rng, {2, 5, 32});       // decoder positions [B, Tq, D]
  attn::Var<float> memory = randn(tape, rng, {2, 9, 32});  // encoder output [B, Tk, D]
  attn::mask::Padding source_lengths({9, 6});              // entry 1: 6 real source tokens
  attn::Var<float> y = mha(x, memory, source_lengths);     // [2, 5, 32]
  // [end]
  std::printf("cross_attention: queries [2, 5, 32] over memory [2, 9, 32] -> %s\n",
              y.shape().str().c_str());
}

void kv_cache() {
  attn::Rng rng(12);
  attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal> mha(
      {.d_model = 32, .heads = 4, .kv_heads = 2, .seed = 3});
  const attn::Tensor<float> x = attn::Tensor<float>::randn({1, 6, 32}, rng);  // [B, T, D]
  attn::Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  const attn::Tensor<float> full = mha(tape.leaf(x)).value();  // all 6 positions at once
  // [doc:kv_cache]
  attn::KVCache<float> cache;  // [B, Hk, L, Dh] keys and values so far
  float diff = 0;
  for (attn::index_t t = 0; t < 6; ++t) {
    tape.clear();  // the cache holds tensors, not Vars: it survives clear()
    attn::Var<float> x_t = attn::slice(tape.leaf(x), t, t + 1, /*axis=*/1);  // [1, 1, 32]
    attn::Var<float> y_t = mha.decode(x_t, cache, attn::mask::Causal{});     // [1, 1, 32]
    for (attn::index_t d = 0; d < 32; ++d)
      diff = std::max(diff, std::abs(y_t.value()[d] - full(0, t, d)));
  }
  std::printf("kv_cache: %lld positions decoded one by one, max |diff| to the full pass = %.1e\n",
              static_cast<long long>(cache.length()), diff);
  // [end]
}

// [doc:new_mask]
// Strided (dilated) causal attention: query i sees keys i, i − s, i − 2s, ...
struct Strided {
  attn::index_t stride = 2;

  bool allowed(attn::index_t, attn::index_t i, attn::index_t j, attn::index_t tq,
               attn::index_t tk) const {
    const attn::index_t p = i + tk - tq;  // end-aligned, as mask::Causal
    return j <= p && (p - j) % stride == 0;
  }
  attn::TileKind tile(attn::index_t b, attn::index_t i0, attn::index_t i1, attn::index_t j0,
                      attn::index_t j1, attn::index_t tq, attn::index_t tk) const {
    if (j0 > i1 - 1 + tk - tq) return attn::TileKind::none;  // wholly in the future
    return attn::classify_elementwise(*this, b, i0, i1, j0, j1, tq, tk);
  }
  void validate(attn::index_t, attn::index_t, attn::index_t) const {
    ATTN_CHECK(stride > 0, attn::value_error, "Strided: stride ", stride, " must be > 0");
  }
};
static_assert(attn::MaskPolicy<Strided>);
// [end]

// [doc:new_score]
// s = q·k / (τ √d): scaled dot product with a temperature τ (a quadratic form with
// alpha = 1/(τ√d), beta_q = beta_k = 0, so every path can run it).
struct TemperedDot {
  static constexpr const char* name = "tempered_dot";
  static constexpr double beta_q = 0, beta_k = 0;
  double tau = 0.5;
  double alpha(attn::index_t d) const { return 1.0 / (tau * std::sqrt(static_cast<double>(d))); }
  template <class T>
  double operator()(const T* q, const T* k, attn::index_t d) const {
    double s = 0;
    for (attn::index_t i = 0; i < d; ++i) s += static_cast<double>(q[i]) * k[i];
    return s * alpha(d);
  }
};
static_assert(attn::ScorePolicy<TemperedDot>);
// [end]

void new_policies() {
  attn::Rng rng(13);
  attn::Tape<float> tape;
  const attn::Var<float> q = randn(tape, rng, {1, 2, 100, 8});
  const attn::Var<float> k = randn(tape, rng, {1, 2, 100, 8});
  const attn::Var<float> v = randn(tape, rng, {1, 2, 100, 8});
  // [doc:new_policies]
  attn::Attention<TemperedDot, attn::kernel::Softmax, Strided> op{{.tau = 2.0}, {}, {.stride = 3}};
  auto ref =
      attn::reference_attention(q.value(), k.value(), v.value(), op.score, op.kernel, op.mask);
  std::printf("new_policies: TemperedDot x Strided, fused vs reference: max |diff| = %.1e\n",
              attn::max_abs_diff(op(q, k, v).value(), ref.out));
  // [end]
}

}  // namespace

int main() {
  quick_start();
  scores();
  kernels();
  masks();
  causal_alignment();
  left_padding();
  empty_rows();
  weights();
  partials();
  learned_biases();
  paths();
  grouped_query();
  dropout();
  self_attention();
  heads_and_projections();
  cross_attention();
  kv_cache();
  new_policies();
  return 0;
}
