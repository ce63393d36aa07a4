// The fused softmax kernel's parts: the tile products and row steps against plain loops, and the
// four backward plans (weights saved or recomputed x one pass or two) against the materialised
// path, finite differences, each other and the thread count.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

using attn::index_t;
using attn::Tensor;
namespace kernel = attn::kernel;
namespace mask = attn::mask;
namespace score = attn::score;

TEST_CASE_TEMPLATE("tile_gemm equals the triple loop for every edge, stride and transposition", T,
                   float, double) {
  attn::Rng rng(31);
  constexpr index_t W = attn::detail::packet_size<T>;
  // Row counts around the register block (6) and column counts around whole packets.
  for (const index_t m : {index_t{1}, index_t{5}, index_t{6}, index_t{13}, index_t{64}})
    for (const index_t n : {index_t{1}, W - 1 > 0 ? W - 1 : index_t{1}, W, 3 * W + 2, 5 * W})
      for (const index_t k : {index_t{1}, index_t{7}, index_t{64}})
        for (const bool transposed : {false, true})
          for (const bool accumulate : {false, true}) {
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(transposed);
            const index_t ldb = attn::detail::packet_round<T>(n) + W, ldc = ldb + 1;
            const Tensor<T> a = Tensor<T>::randn({m * k}, rng);
            const Tensor<T> b = Tensor<T>::randn({k * ldb}, rng);
            Tensor<T> c = Tensor<T>::randn({m * ldc}, rng);
            // A(r, kk) stored row-major [m, k] or, transposed, [k, m].
            const index_t ars = transposed ? 1 : k, acs = transposed ? m : 1;
            std::vector<double> want(static_cast<std::size_t>(m * n));
            for (index_t r = 0; r < m; ++r)
              for (index_t j = 0; j < n; ++j) {
                double s = accumulate ? double(c[r * ldc + j]) : 0.0;
                for (index_t kk = 0; kk < k; ++kk)
                  s += double(a[r * ars + kk * acs]) * double(b[kk * ldb + j]);
                want[static_cast<std::size_t>(r * n + j)] = s;
              }
            attn::detail::tile_gemm(m, n, k, a.data(), ars, acs, b.data(), ldb, c.data(), ldc,
                                    accumulate);
            double err = 0;
            for (index_t r = 0; r < m; ++r)
              for (index_t j = 0; j < n; ++j)
                err = std::max(err, std::abs(double(c[r * ldc + j]) -
                                             want[static_cast<std::size_t>(r * n + j)]));
            CHECK(err < (std::is_same_v<T, float> ? 1e-4 : 1e-12) * double(k + 1));
          }
}

TEST_CASE_TEMPLATE("softmax row steps: masked entries give exactly 0, sums and maxima match", T,
                   float, double) {
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  attn::Rng rng(32);
  for (const index_t n : {index_t{1}, index_t{7}, index_t{16}, index_t{37}}) {
    const Tensor<T> x = Tensor<T>::randn({n}, rng, 0, 3);
    const Tensor<T> bias = Tensor<T>::randn({n}, rng);
    std::vector<T> row(x.data(), x.data() + n);
    const T alpha = T(0.7);
    const T mx = attn::detail::scale_row_max(row.data(), n, alpha, bias.data());
    T want_max = ninf;
    for (index_t j = 0; j < n; ++j) {
      CHECK(row[j] == doctest::Approx(alpha * x[j] + bias[j]));
      want_max = std::max(want_max, row[j]);
    }
    CHECK(mx == want_max);
    for (index_t j = 0; j < n; j += 3) row[j] = ninf;  // masked
    std::vector<T> before = row;
    const T sum = attn::detail::exp_row_sum(row.data(), n, mx);
    double want_sum = 0;
    for (index_t j = 0; j < n; ++j) {
      if (before[j] == ninf) {
        CHECK(row[j] == T{0});  // exactly, not a denormal
      } else {
        CHECK(double(row[j]) == doctest::Approx(std::exp(double(before[j] - mx))).epsilon(1e-6));
        want_sum += std::exp(double(before[j] - mx));
      }
    }
    CHECK(double(sum) == doctest::Approx(want_sum).epsilon(1e-6));
    // dS = P ∘ (dP − D)
    std::vector<T> dp(row.size());
    for (index_t j = 0; j < n; ++j) dp[j] = T(j) - T(2);
    attn::detail::softmax_grad_row(row.data(), dp.data(), n, T(0.5));
    for (index_t j = 0; j < n; ++j)
      CHECK(dp[j] == doctest::Approx(row[j] * (T(j) - T(2.5))).epsilon(1e-6));
  }
}

namespace {

// pexp_float on packet type P against exp in double: x from −100 to 0 in steps of about 3e-5, and
// −∞; relative error <= 2e-7 down to −87.3, exactly 0 below −87.34 (no denormals).
template <class P>
void check_pexp_float() {
  using namespace Eigen::internal;
  constexpr int W = unpacket_traits<P>::size;
  constexpr int count = 3200000;
  double worst = 0;
  int wrong = 0;
  alignas(64) float in[W], out[W];
  for (int i = 0; i < count; i += W) {
    for (int k = 0; k < W; ++k) in[k] = -100.0f * static_cast<float>(i + k) / count;
    if (i == 0) in[1] = -std::numeric_limits<float>::infinity();
    pstoreu(out, attn::detail::pexp_float(ploadu<P>(in)));
    for (int k = 0; k < W; ++k) {
      const double want = std::exp(static_cast<double>(in[k]));
      if (in[k] >= -87.3f)
        worst = std::max(worst, std::abs(out[k] - want) / want);
      else if (in[k] < -87.34f && out[k] != 0.0f)
        ++wrong;
    }
  }
  MESSAGE(W << " floats per packet: worst relative error " << worst);
  CHECK(worst <= 2e-7);
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("pexp_float: relative error <= 2e-7 and exact zeros, on every packet width built") {
#ifdef EIGEN_VECTORIZE
  check_pexp_float<Eigen::internal::Packet4f>();
#endif
#ifdef EIGEN_VECTORIZE_AVX
  check_pexp_float<Eigen::internal::Packet8f>();
#endif
#ifdef EIGEN_VECTORIZE_AVX512
  check_pexp_float<Eigen::internal::Packet16f>();
#endif
}

namespace {

using Plans = std::vector<attn::AttentionBackward>;
const Plans all_plans = {{attn::BackwardWeights::saved, attn::BackwardPasses::single},
                         {attn::BackwardWeights::saved, attn::BackwardPasses::two},
                         {attn::BackwardWeights::recomputed, attn::BackwardPasses::single},
                         {attn::BackwardWeights::recomputed, attn::BackwardPasses::two}};

template <class T>
struct Grads {
  Tensor<T> o, dq, dk, dv, w;
};

// Output, input gradients of sum(o ∘ r) and (when asked) the weights from the fused path with
// the given plan, or from the materialised path when plan is null.
template <class Mask, class Score, class T>
Grads<T> run(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& r,
             const Mask& m, const attn::AttentionBackward* plan, attn::AttentionDropout drop = {},
             bool weights = false) {
  attn::Tape<T> tape;
  auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
  attn::Attention<Score, kernel::Softmax, Mask> op{Score{}, kernel::Softmax{}, m};
  op.dropout = drop;
  if (plan) op.backward = *plan;
  Grads<T> g;
  auto o = plan ? op(qv, kv, vv, weights ? &g.w : nullptr)
                : op.materialized(qv, kv, vv, weights ? &g.w : nullptr);
  tape.backward(attn::sum(o * tape.leaf(r)));
  g.o = o.value();
  g.dq = qv.grad();
  g.dk = kv.grad();
  g.dv = vv.grad();
  return g;
}

// Every plan against the materialised path; the two pass orders bitwise against each other
// where the single pass walks by key/value head (they add the same products in the same order;
// the walk by query head adds each head's sums instead).
template <class Mask, class Score, class T>
void check_plans(index_t B, index_t H, index_t Hk, index_t Tq, index_t Tk, index_t Dh, index_t Dv,
                 const Mask& m, attn::AttentionDropout drop = {}) {
  attn::Rng rng(40 + static_cast<std::uint64_t>(Tq));
  const Tensor<T> q = Tensor<T>::randn({B, H, Tq, Dh}, rng, 0, 0.8);
  const Tensor<T> k = Tensor<T>::randn({B, Hk, Tk, Dh}, rng, 0, 0.8);
  const Tensor<T> v = Tensor<T>::randn({B, Hk, Tk, Dv}, rng);
  const Tensor<T> r = Tensor<T>::randn({B, H, Tq, Dv}, rng);
  const Grads<T> ref = run<Mask, Score>(q, k, v, r, m, nullptr, drop, true);
  const double tol = std::is_same_v<T, float> ? 2e-4 : 1e-11;
  std::vector<Grads<T>> got;
  for (const attn::AttentionBackward& plan : all_plans) {
    CAPTURE(static_cast<int>(plan.weights));
    CAPTURE(static_cast<int>(plan.passes));
    got.push_back(run<Mask, Score>(q, k, v, r, m, &plan, drop, true));
    const Grads<T>& g = got.back();
    CHECK(attn::max_abs_diff(g.o, ref.o) < tol);
    CHECK(attn::max_abs_diff(g.w, ref.w) < tol);
    CHECK(attn::max_abs_diff(g.dq, ref.dq) < 10 * tol);
    CHECK(attn::max_abs_diff(g.dk, ref.dk) < 10 * tol);
    CHECK(attn::max_abs_diff(g.dv, ref.dv) < 10 * tol);
  }
  const bool by_query_head =
      attn::detail::backward_walk({attn::BackwardWeights::automatic, attn::BackwardPasses::single},
                                  {B, H, Hk, Tq, Tk, Dh, Dv}) ==
      attn::detail::BackwardWalk::by_query_head;
  for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {       // single pass vs two passes
    CHECK(attn::max_abs_diff(got[i].dq, got[i + 1].dq) == 0.0);  // dQ: the same walk per row
    if (by_query_head) continue;
    CHECK(attn::max_abs_diff(got[i].dk, got[i + 1].dk) == 0.0);
    CHECK(attn::max_abs_diff(got[i].dv, got[i + 1].dv) == 0.0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("backward plans: saved or recomputed weights, one pass or two, = materialised",
                   T, float, double) {
  // Lengths off the 64-wide tiles, head widths off whole packets, grouped queries, Tq != Tk.
  check_plans<mask::None, score::ScaledDot, T>(2, 4, 2, 70, 131, 16, 8, {});
  check_plans<mask::Causal, score::ScaledDot, T>(1, 2, 2, 150, 150, 64, 64, {});
  check_plans<mask::Causal, score::NegSqEuclidean, T>(2, 3, 1, 65, 100, 5, 3, {});
  check_plans<mask::SlidingWindow, score::Dot, T>(1, 2, 1, 129, 129, 8, 12,
                                                  mask::SlidingWindow{40, 3});
  check_plans<mask::Padding, score::ScaledDot, T>(3, 2, 2, 40, 90, 4, 4,
                                                  mask::Padding({90, 0, 33}));
  check_plans<mask::Causal, score::ScaledDot, T>(2, 2, 2, 100, 100, 8, 8, {}, {0.25, 5});
}

namespace {

// Every tile of a Tq x Tk call: tile_blocks' kinds, live blocks and spans against the mask asked
// element by element.
template <class Mask>
void check_tile_blocks(const Mask& m, index_t batch, index_t tq, index_t tk) {
  using attn::detail::TileBlocks;
  constexpr index_t E = TileBlocks::edge;
  int partial = 0;
  for (index_t b = 0; b < batch; ++b)
    for (index_t i0 = 0; i0 < tq; i0 += attn::detail::attn_query_tile)
      for (index_t j0 = 0; j0 < tk; j0 += attn::detail::attn_key_tile) {
        const index_t br = std::min(attn::detail::attn_query_tile, tq - i0),
                      bc = std::min(attn::detail::attn_key_tile, tk - j0);
        const TileBlocks t = attn::detail::tile_blocks(m, b, i0, br, j0, bc, tq, tk);
        CAPTURE(b);
        CAPTURE(i0);
        CAPTURE(j0);
        // Which blocks hold an allowed element, and what the tile holds in all.
        std::vector<std::vector<bool>> any(static_cast<std::size_t>((br + E - 1) / E),
                                           std::vector<bool>((bc + E - 1) / E, false));
        index_t allowed = 0;
        for (index_t i = 0; i < br; ++i)
          for (index_t j = 0; j < bc; ++j)
            if (m.allowed(b, i0 + i, j0 + j, tq, tk)) {
              any[i / E][j / E] = true;
              ++allowed;
            }
        if (allowed == 0) CHECK(t.kind == attn::TileKind::none);
        if (allowed == br * bc) CHECK(t.kind != attn::TileKind::none);
        if (t.kind == attn::TileKind::none) CHECK(allowed == 0);
        if (t.kind == attn::TileKind::all) CHECK(allowed == br * bc);
        if (t.kind != attn::TileKind::partial) continue;
        ++partial;
        const index_t nr = static_cast<index_t>(any.size()),
                      nc = static_cast<index_t>(any[0].size());
        for (index_t r = 0; r < nr; ++r)
          for (index_t c = 0; c < nc; ++c) CHECK(t.live[r][c] == any[r][c]);
        // Block x of the rows (of_column false) or of the columns: the span [lo, hi) from its
        // first to its last live block, from the elements, against the tile's answer.
        auto check_span = [&](index_t x, bool of_column, std::pair<index_t, index_t> got) {
          const index_t len = of_column ? br : bc, n = of_column ? nr : nc;
          index_t lo = len, hi = 0;
          for (index_t y = 0; y < n; ++y)
            if (of_column ? any[y][x] : any[x][y]) {
              lo = std::min(lo, y * E);
              hi = std::min(len, (y + 1) * E);
            }
          CHECK(got.second - got.first == (hi > lo ? hi - lo : 0));
          if (hi > lo) CHECK(got.first == lo);
        };
        for (index_t r = 0; r < nr; ++r) check_span(r, false, t.columns(r));
        for (index_t c = 0; c < nc; ++c) check_span(c, true, t.rows(c));
      }
  CHECK(partial > 0);  // the cases below are chosen to have partial tiles
}

// Batch entry b's mask: blocks of 32 x 32 ruled out whole (a block of keys for all of a query
// tile, in a different place in each query tile; a block of queries for all of a key tile),
// allowed elements scattered in the others, row 5 of entry 0 with no key at all.
mask::Custom dead_blocks_mask(index_t batch, index_t tq, index_t tk) {
  Tensor<std::uint8_t> m({batch, tq, tk});
  for (index_t b = 0; b < batch; ++b)
    for (index_t i = 0; i < tq; ++i)
      for (index_t j = 0; j < tk; ++j) {
        const bool dead_block = (i / 128 + j / 32 + b) % 3 == 0 || (i / 32 + j / 128) % 3 == 1;
        const bool allowed = !dead_block && (i * 7 + j * 3) % 11 != 0 && !(b == 0 && i == 5);
        m[(b * tq + i) * tk + j] = static_cast<std::uint8_t>(allowed);
      }
  return mask::Custom(m);
}

}  // namespace

TEST_CASE("tile blocks: live blocks and spans of partial tiles = the mask element by element") {
  check_tile_blocks(mask::Causal{}, 1, 300, 300);
  check_tile_blocks(mask::Causal{}, 1, 100, 260);  // end-aligned: Tk − Tq = 160
  check_tile_blocks(mask::CausalTopLeft{}, 1, 260, 100);
  check_tile_blocks(mask::SlidingWindow{40, 3}, 1, 300, 300);
  check_tile_blocks(mask::Padding({300, 0, 45, 129}), 4, 150, 300);
  check_tile_blocks(mask::BigBird{16, 1, 1, 1, 5}, 1, 256, 256);
  check_tile_blocks(dead_blocks_mask(2, 200, 260), 2, 200, 260);
  // A causal diagonal tile computes 10 of its 16 blocks, each row block up to its diagonal.
  const auto t = attn::detail::tile_blocks(mask::Causal{}, 0, 128, 128, 128, 128, 256, 256);
  int live = 0;
  for (const auto& row : t.live)
    for (bool x : row) live += x;
  CHECK(live == 10);
  CHECK(t.columns(1) == std::pair<index_t, index_t>{0, 64});
  CHECK(t.rows(1) == std::pair<index_t, index_t>{32, 128});
}

TEST_CASE_TEMPLATE("backward plans: partial tiles with whole blocks ruled out = materialised", T,
                   float, double) {
  // Blocks of 32 x 32 ruled out in every position of a tile, so that row blocks of P and dS are
  // zero in one tile and not the next, a tile that starts an accumulator (dQ, or dK and dV) has
  // nothing for some of its blocks (those rows must start at 0), and spans cover dead blocks.
  // The unmasked call first leaves products in every scratch accumulator of the threads.
  check_plans<mask::None, score::ScaledDot, T>(2, 2, 2, 200, 260, 16, 8, {});
  check_plans<mask::Custom, score::ScaledDot, T>(2, 2, 2, 200, 260, 16, 8,
                                                 dead_blocks_mask(2, 200, 260));
  check_plans<mask::Custom, score::NegSqEuclidean, T>(2, 2, 1, 200, 260, 5, 12,
                                                      dead_blocks_mask(2, 200, 260), {0.2, 9});
}

TEST_CASE("backward plans: gradients by finite differences (double)") {
  attn::Rng rng(41);
  const Tensor<double> q = Tensor<double>::randn({2, 2, 7, 3}, rng),
                       k = Tensor<double>::randn({2, 1, 9, 3}, rng),
                       v = Tensor<double>::randn({2, 1, 9, 2}, rng),
                       r = Tensor<double>::randn({2, 2, 7, 2}, rng);
  for (const attn::AttentionBackward& plan : all_plans)
    for (const double p : {0.0, 0.3}) {
      CAPTURE(static_cast<int>(plan.weights));
      CAPTURE(static_cast<int>(plan.passes));
      attn::Attention<score::NegSqEuclidean, kernel::Softmax, mask::Causal> op;
      op.backward = plan;
      op.dropout = {p, 12};
      auto f = [&](const std::vector<attn::Var<double>>& x) {
        return attn::sum(op(x[0], x[1], x[2]) * x[0].tape().leaf(r));
      };
      const attn::GradientCheck c = attn::check_gradient(f, {q, k, v}, 1e-6, 1e-5);
      CHECK_MESSAGE(c.ok, c.report());
    }
}

TEST_CASE("backward plans: results do not depend on the thread count") {
  attn::Rng rng(42);
  const Tensor<float> q = Tensor<float>::randn({2, 4, 150, 32}, rng),
                      k = Tensor<float>::randn({2, 2, 150, 32}, rng),
                      v = Tensor<float>::randn({2, 2, 150, 32}, rng),
                      r = Tensor<float>::randn({2, 4, 150, 32}, rng);
  const int saved = attn::num_threads();
  for (const attn::AttentionBackward& plan : all_plans) {
    attn::set_num_threads(1);
    const Grads<float> a = run<mask::Causal, score::ScaledDot>(q, k, v, r, {}, &plan, {0.1, 3});
    attn::set_num_threads(2);
    const Grads<float> b = run<mask::Causal, score::ScaledDot>(q, k, v, r, {}, &plan, {0.1, 3});
    CHECK(attn::max_abs_diff(a.o, b.o) == 0.0);
    CHECK(attn::max_abs_diff(a.dq, b.dq) == 0.0);
    CHECK(attn::max_abs_diff(a.dk, b.dk) == 0.0);
    CHECK(attn::max_abs_diff(a.dv, b.dv) == 0.0);
  }
  attn::set_num_threads(saved);
}

TEST_CASE("backward plans: the automatic choice follows the documented bounds") {
  using attn::detail::AttentionGeometry;
  const attn::AttentionBackward automatic{};
  // B·H·Tq·Tk at the bound keeps the weights, one more key does not.
  const AttentionGeometry at{32, 8, 8, 128, 128, 32, 32};
  const AttentionGeometry over{32, 8, 8, 128, 129, 32, 32};
  CHECK(at.B * at.H * at.Tq * at.Tk == attn::attn_saved_weights_limit);
  CHECK(attn::detail::save_weights_for_backward(automatic, at));
  CHECK_FALSE(attn::detail::save_weights_for_backward(automatic, over));
  CHECK_FALSE(attn::detail::save_weights_for_backward(
      {attn::BackwardWeights::recomputed, attn::BackwardPasses::automatic}, at));
  CHECK(attn::detail::save_weights_for_backward(
      {attn::BackwardWeights::saved, attn::BackwardPasses::automatic}, over));
  // By key/value head from B·Hk = 4 (batch x key/value heads); for grouped queries with fewer,
  // by query head from B·H = 4 while the per-query-head sums B·H·Tk·(Dh + Dv + 1) fit the
  // weights' limit or Tk <= Tq (then no more than the query side's q, dO and log-sum-exp); two
  // passes else.
  using attn::detail::backward_walk;
  using enum attn::detail::BackwardWalk;
  CHECK(backward_walk(automatic, AttentionGeometry{1, 8, 4, 9, 9, 4, 4}) == by_key_head);
  CHECK(backward_walk(automatic, AttentionGeometry{4, 8, 1, 9, 9, 4, 4}) == by_key_head);
  CHECK(backward_walk(automatic, AttentionGeometry{1, 8, 2, 9, 9, 4, 4}) == by_query_head);
  CHECK(backward_walk(automatic, AttentionGeometry{1, 4, 1, 9, 9, 4, 4}) == by_query_head);
  CHECK(backward_walk(automatic, AttentionGeometry{1, 3, 3, 9, 9, 4, 4}) == two_passes);
  CHECK(backward_walk(automatic, AttentionGeometry{1, 2, 1, 9, 9, 4, 4}) == two_passes);
  // 64 queries on 4096 keys: 8 x 4096 x 129 = 4,227,072 sums > 2^22, two passes; on 4000 keys
  // 4,128,000 fit. Self-attention over 4096 (or any length) takes the per-query-head walk.
  const AttentionGeometry sums_over{1, 8, 2, 64, 4096, 64, 64}, sums_fit{1, 8, 2, 64, 4000, 64, 64};
  CHECK(backward_walk(automatic, sums_over) == two_passes);
  CHECK(backward_walk(automatic, sums_fit) == by_query_head);
  CHECK(backward_walk(automatic, AttentionGeometry{1, 8, 2, 4096, 4096, 64, 64}) == by_query_head);
  CHECK(backward_walk(automatic, AttentionGeometry{1, 8, 2, 4097, 4096, 64, 64}) == by_query_head);
  CHECK(backward_walk(automatic, AttentionGeometry{1, 8, 2, 1 << 16, 1 << 16, 64, 64}) ==
        by_query_head);
  // A plan's choice of passes: two always; one by query head where that walk would be chosen
  // for few key/value tasks and its sums fit (even with few query tasks), by key/value head else.
  const attn::AttentionBackward one{attn::BackwardWeights::automatic, attn::BackwardPasses::single};
  const attn::AttentionBackward two{attn::BackwardWeights::automatic, attn::BackwardPasses::two};
  CHECK(backward_walk(two, AttentionGeometry{4, 8, 8, 9, 9, 4, 4}) == two_passes);
  CHECK(backward_walk(one, AttentionGeometry{1, 2, 1, 9, 9, 4, 4}) == by_query_head);
  CHECK(backward_walk(one, AttentionGeometry{1, 3, 3, 9, 9, 4, 4}) == by_key_head);
  CHECK(backward_walk(one, sums_over) == by_key_head);
  CHECK(backward_walk(one, sums_fit) == by_query_head);
}
