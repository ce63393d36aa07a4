// Tests for attn::gemm and attn::gemm_serial (core/gemm.hpp): every transpose combination, with
// and without accumulation, against a naive triple loop in double on odd sizes; the empty edge
// cases; and bitwise-identical results for 1, 2 and 3 threads.
#include <doctest/doctest.h>
#include <attn/core/gemm.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace {

struct Dims {
  attn::index_t m, n, k;
};

// The sizes every product is checked at: degenerate, small and odd, and large enough to be split
// into several blocks along rows (m >= n) or along columns (m < n).
constexpr Dims kSizes[] = {{1, 1, 1},     {7, 13, 5},   {130, 67, 200},
                           {600, 70, 90}, {9, 333, 21}, {1, 200, 3}};

template <class T>
std::vector<T> random_vector(attn::index_t n, attn::Rng& rng) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (T& x : v) x = static_cast<T>(rng.uniform(-1.0, 1.0));
  return v;
}

// C = op(A) op(B) (+ C0) by definition, in double. A is [m, k] (or [k, m] when ta), B is [k, n]
// (or [n, k] when tb), all row-major. Also returns, per element, Σ_p |a_ip b_pj| (+ |c0|): the
// scale of the rounding error any order of summation in T may make.
struct Reference {
  std::vector<double> value, magnitude;
};

template <class T>
Reference naive_gemm(const std::vector<T>& a, bool ta, const std::vector<T>& b, bool tb,
                     const std::vector<T>& c0, Dims d, bool accumulate) {
  Reference r{std::vector<double>(static_cast<std::size_t>(d.m * d.n)),
              std::vector<double>(static_cast<std::size_t>(d.m * d.n))};
  for (attn::index_t i = 0; i < d.m; ++i)
    for (attn::index_t j = 0; j < d.n; ++j) {
      const double c =
          accumulate ? static_cast<double>(c0[static_cast<std::size_t>(i * d.n + j)]) : 0.0;
      double s = c, mag = std::abs(c);
      for (attn::index_t p = 0; p < d.k; ++p) {
        const double x = a[static_cast<std::size_t>(ta ? p * d.m + i : i * d.k + p)];
        const double y = b[static_cast<std::size_t>(tb ? j * d.k + p : p * d.n + j)];
        s += x * y;
        mag += std::abs(x * y);
      }
      r.value[static_cast<std::size_t>(i * d.n + j)] = s;
      r.magnitude[static_cast<std::size_t>(i * d.n + j)] = mag;
    }
  return r;
}

// Worst |got - want| in units of the classic bound (k + 1) ε Σ|a b| for a k-term dot product in
// T (plus the accumulated C): below 1 for any summation order, NaN counts as infinite.
template <class T>
double worst_error(const std::vector<T>& got, const Reference& want, attn::index_t k) {
  const double eps = static_cast<double>(std::numeric_limits<T>::epsilon());
  double worst = 0.0;
  for (std::size_t i = 0; i < want.value.size(); ++i) {
    const double bound =
        eps * static_cast<double>(k + 1) * want.magnitude[i] + std::numeric_limits<T>::min();
    const double e = std::abs(static_cast<double>(got[i]) - want.value[i]) / bound;
    worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(worst, e);
  }
  return worst;
}

enum class Kind { parallel, serial };

template <class T>
void check_all_combinations(Kind kind) {
  attn::Rng rng(31);
  for (const Dims d : kSizes)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const bool accumulate : {false, true}) {
          CAPTURE(d.m);
          CAPTURE(d.n);
          CAPTURE(d.k);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(accumulate);
          const auto a = random_vector<T>(d.m * d.k, rng);
          const auto b = random_vector<T>(d.k * d.n, rng);
          std::vector<T> c = random_vector<T>(d.m * d.n, rng);
          if (!accumulate) {
            // Without accumulation C's old contents must not matter: make them poison.
            for (T& x : c) x = std::numeric_limits<T>::quiet_NaN();
          }
          const std::vector<T> c0 = c;
          const auto want = naive_gemm(a, ta, b, tb, c0, d, accumulate);
          if (kind == Kind::parallel)
            attn::gemm(a.data(), ta, b.data(), tb, c.data(), d.m, d.n, d.k, accumulate);
          else
            attn::gemm_serial(a.data(), ta, b.data(), tb, c.data(), d.m, d.n, d.k, accumulate);
          CHECK(worst_error(c, want, d.k) <= 1.0);
        }
}

// Restores the thread count a test changed, even when a CHECK fails.
struct ThreadCountGuard {
  int saved = attn::num_threads();
  ~ThreadCountGuard() { attn::set_num_threads(saved); }
};

}  // namespace

TEST_CASE_TEMPLATE("gemm matches the naive product for every transpose and accumulate setting", T,
                   float, double) {
  check_all_combinations<T>(Kind::parallel);
}

TEST_CASE_TEMPLATE(
    "gemm_serial matches the naive product for every transpose and accumulate setting", T, float,
    double) {
  check_all_combinations<T>(Kind::serial);
}

TEST_CASE("gemm: a known 2x3 by 3x2 product") {
  const std::vector<double> a{1, 2, 3, 4, 5, 6};     // [2, 3]
  const std::vector<double> b{7, 8, 9, 10, 11, 12};  // [3, 2]
  std::vector<double> c(4, -1.0);
  attn::gemm(a.data(), false, b.data(), false, c.data(), 2, 2, 3);
  CHECK(c == std::vector<double>{58, 64, 139, 154});
  attn::gemm(a.data(), false, b.data(), false, c.data(), 2, 2, 3, true);
  CHECK(c == std::vector<double>{116, 128, 278, 308});
  // Aᵀ (A stored [2, 3] read as [3, 2]) times Bᵀ (B stored [3, 2] read as [2, 3]): 3x3.
  std::vector<double> d(9);
  attn::gemm(a.data(), true, b.data(), true, d.data(), 3, 3, 2);
  // (Aᵀ Bᵀ)[i][j] = Σ_p A[p][i] B[j][p]
  CHECK(d == std::vector<double>{1 * 7 + 4 * 8, 1 * 9 + 4 * 10, 1 * 11 + 4 * 12,  //
                                 2 * 7 + 5 * 8, 2 * 9 + 5 * 10, 2 * 11 + 5 * 12,  //
                                 3 * 7 + 6 * 8, 3 * 9 + 6 * 10, 3 * 11 + 6 * 12});
}

TEST_CASE("gemm: empty dimensions") {
  const std::vector<float> a(12, 1.0f), b(12, 1.0f);
  SUBCASE("k = 0 writes zeros, or leaves C alone when accumulating") {
    std::vector<float> c(6, 5.0f);
    attn::gemm(a.data(), false, b.data(), false, c.data(), 2, 3, 0, true);
    CHECK(c == std::vector<float>(6, 5.0f));
    attn::gemm(a.data(), false, b.data(), false, c.data(), 2, 3, 0);
    CHECK(c == std::vector<float>(6, 0.0f));
    std::vector<float> s(6, 5.0f);
    attn::gemm_serial(a.data(), false, b.data(), false, s.data(), 2, 3, 0);
    CHECK(s == std::vector<float>(6, 0.0f));
  }
  SUBCASE("m = 0 or n = 0 touches nothing") {
    std::vector<float> c(6, 5.0f);
    attn::gemm(a.data(), false, b.data(), false, c.data(), 0, 3, 4);
    attn::gemm(a.data(), false, b.data(), false, c.data(), 3, 0, 4);
    attn::gemm_serial(a.data(), false, b.data(), false, c.data(), 0, 3, 4);
    CHECK(c == std::vector<float>(6, 5.0f));
  }
}

TEST_CASE("gemm_block_size depends only on the length and is at least 256") {
  CHECK(attn::gemm_block_size(1) == 256);
  CHECK(attn::gemm_block_size(1024) == 256);
  CHECK(attn::gemm_block_size(4096) == 512);
  for (const attn::index_t n : {1, 63, 700, 2048, 5000, 100000}) {
    CHECK(attn::gemm_block_size(n) >= 64);
    CHECK(attn::gemm_block_size(n) % 16 == 0);
    CHECK(attn::block_count(n, attn::gemm_block_size(n)) * attn::gemm_block_size(n) >= n);
  }
}

TEST_CASE("gemm: results are bitwise identical for 1, 2 and 3 threads (m = n = k = 700)") {
  ThreadCountGuard guard;
  const attn::index_t n = 700;
  attn::Rng rng(5);
  const auto a = random_vector<float>(n * n, rng);
  const auto b = random_vector<float>(n * n, rng);
  const auto c0 = random_vector<float>(n * n, rng);
  for (const bool ta : {false, true})
    for (const bool accumulate : {false, true}) {
      CAPTURE(ta);
      CAPTURE(accumulate);
      std::vector<float> results[3];
      for (int threads = 1; threads <= 3; ++threads) {
        attn::set_num_threads(threads);
#ifdef _OPENMP
        CHECK(attn::num_threads() == threads);
#endif
        std::vector<float> c = c0;
        attn::gemm(a.data(), ta, b.data(), !ta, c.data(), n, n, n, accumulate);
        results[threads - 1] = std::move(c);
      }
      const std::size_t bytes = results[0].size() * sizeof(float);
      CHECK(std::memcmp(results[0].data(), results[1].data(), bytes) == 0);
      CHECK(std::memcmp(results[0].data(), results[2].data(), bytes) == 0);
      // And the product is right, not just reproducible: spot-check a few elements.
      for (const attn::index_t i : {attn::index_t{0}, attn::index_t{333}, n - 1}) {
        const attn::index_t j = (i * 7 + 11) % n;
        double want = accumulate ? c0[static_cast<std::size_t>(i * n + j)] : 0.0,
               mag = std::abs(want);
        for (attn::index_t p = 0; p < n; ++p) {
          const double x = a[static_cast<std::size_t>(ta ? p * n + i : i * n + p)];
          const double y = b[static_cast<std::size_t>(ta ? p * n + j : j * n + p)];  // tb = !ta
          want += x * y;
          mag += std::abs(x * y);
        }
        CHECK(std::abs(results[0][static_cast<std::size_t>(i * n + j)] - want) <=
              1e-7 * double(n) * mag);
      }
    }
  attn::set_num_threads(guard.saved);
  CHECK(attn::num_threads() == guard.saved);
}
