// Tests for attn::gemm and attn::gemm_serial (core/gemm.hpp): every transpose combination, with
// and without accumulation, against a naive triple loop in double on odd sizes (including long
// inner dimensions that gemm cuts into pieces), on every backend attn was built with; the empty
// edge cases; and bitwise-identical results for 1, 2 and 3 threads.
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

// The sizes every product is checked at: degenerate, small and odd, large enough to be split
// into several blocks along rows (m >= n) or along columns (m < n), and small outputs with a long
// inner dimension, which gemm splits into 2 and 4 pieces of k.
// Vectors among them ({1, ...}, {..., 1, ...}): gemm runs those with Eigen whatever the backend.
constexpr Dims kSizes[] = {{1, 1, 1},     {7, 13, 5},  {130, 67, 200}, {600, 70, 90},
                           {9, 333, 21},  {1, 200, 3}, {24, 19, 2100}, {5, 40, 4500},
                           {1, 520, 260}, {300, 1, 40}};

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

// Restores the GEMM backend a test changed.
struct BackendGuard {
  attn::GemmBackend saved = attn::gemm_backend();
  ~BackendGuard() { attn::set_gemm_backend(saved); }
};

// The backends this build has: Eigen always, OpenBLAS when built with ATTN_BLAS=OpenBLAS.
std::vector<attn::GemmBackend> backends() {
  std::vector<attn::GemmBackend> b{attn::GemmBackend::eigen};
  if (attn::have_openblas()) b.push_back(attn::GemmBackend::openblas);
  return b;
}

}  // namespace

TEST_CASE_TEMPLATE("gemm matches the naive product for every transpose and accumulate setting", T,
                   float, double) {
  BackendGuard guard;
  for (const attn::GemmBackend b : backends()) {
    CAPTURE(attn::gemm_backend_name(b));
    attn::set_gemm_backend(b);
    check_all_combinations<T>(Kind::parallel);
  }
}

TEST_CASE_TEMPLATE(
    "gemm_serial matches the naive product for every transpose and accumulate setting", T, float,
    double) {
  BackendGuard guard;
  for (const attn::GemmBackend b : backends()) {
    CAPTURE(attn::gemm_backend_name(b));
    attn::set_gemm_backend(b);
    check_all_combinations<T>(Kind::serial);
  }
}

TEST_CASE("gemm backends: the choice is reported, and OpenBLAS only when built with it") {
  BackendGuard guard;
  CHECK(attn::gemm_backend_name(attn::GemmBackend::eigen).rfind("Eigen 3.", 0) == 0);
  if (attn::have_openblas()) {
    attn::set_gemm_backend(attn::GemmBackend::openblas);
    CHECK(attn::gemm_backend() == attn::GemmBackend::openblas);
    CHECK(attn::gemm_backend_name().rfind("OpenBLAS", 0) == 0);
  } else {
    CHECK_THROWS_AS(attn::set_gemm_backend(attn::GemmBackend::openblas), attn::value_error);
    CHECK(attn::gemm_backend() == attn::GemmBackend::eigen);
  }
  attn::set_gemm_backend(attn::GemmBackend::eigen);
  CHECK(attn::gemm_backend() == attn::GemmBackend::eigen);
}

TEST_CASE("gemm_inner_pieces: only small outputs with a long inner dimension are cut") {
  CHECK(attn::gemm_inner_pieces(256, 256, 4096) == 4);
  CHECK(attn::gemm_inner_pieces(384, 384, 2048) == 2);
  CHECK(attn::gemm_inner_pieces(256, 256, 1000) == 1);
  CHECK(attn::gemm_inner_pieces(4096, 256, 4096) == 1);
  CHECK(attn::gemm_inner_pieces(1024, 256, 4096) == 1);
  CHECK(attn::gemm_inner_pieces(256, 256, 3072) == 2);  // not 3: two threads stay evenly loaded
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

TEST_CASE(
    "gemm_block_size depends only on the length and gives 1, 2, 4 or 8 blocks, of at least "
    "256 from n = 512") {
  CHECK(attn::gemm_block_size(1) == 256);
  CHECK(attn::gemm_block_size(1024) == 256);
  CHECK(attn::gemm_block_size(4096) == 512);
  CHECK(attn::gemm_block_size(768) == 384);   // 2 blocks, not 3 of 256
  CHECK(attn::gemm_block_size(1152) == 288);  // 4 blocks, not 5 of 256
  CHECK(attn::gemm_block_size(384) == 192);   // 2 halves, not 256 and 128
  for (const attn::index_t n : {1, 63, 257, 384, 700, 768, 1152, 1536, 2048, 3000, 5000, 100000}) {
    CAPTURE(n);
    const attn::index_t bs = attn::gemm_block_size(n), blocks = attn::block_count(n, bs);
    CHECK(bs >= (n >= 512 ? 256 : 128));
    CHECK(bs % 16 == 0);
    CHECK(blocks * bs >= n);
    CHECK((blocks == 1 || blocks == 2 || blocks == 4 || blocks == 8));
  }
}

TEST_CASE("gemm: results are bitwise identical for 1, 2 and 3 threads (m = n = k = 700)") {
  ThreadCountGuard guard;
  BackendGuard backend_guard;
  const attn::index_t n = 700;
  attn::Rng rng(5);
  const auto a = random_vector<float>(n * n, rng);
  const auto b = random_vector<float>(n * n, rng);
  const auto c0 = random_vector<float>(n * n, rng);
  for (const attn::GemmBackend backend : backends())
    for (const bool ta : {false, true})
      for (const bool accumulate : {false, true}) {
        CAPTURE(attn::gemm_backend_name(backend));
        CAPTURE(ta);
        CAPTURE(accumulate);
        attn::set_gemm_backend(backend);
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

TEST_CASE("gemm: a weight gradient cut into pieces of k is bitwise identical for 1, 2, 3 threads") {
  // dW [64, 64] = dYᵀ X over 4096 rows, as in a transformer's backward pass: 4 pieces of k,
  // repeated, so that a race in the backend's buffers (concurrent calls) would show.
  ThreadCountGuard guard;
  BackendGuard backend_guard;
  const attn::index_t d = 64, rows = 4096;
  attn::Rng rng(9);
  const auto dy = random_vector<float>(rows * d, rng);
  const auto x = random_vector<float>(rows * d, rng);
  for (const attn::GemmBackend backend : backends()) {
    CAPTURE(attn::gemm_backend_name(backend));
    attn::set_gemm_backend(backend);
    std::vector<float> first;
    for (int threads = 1; threads <= 3; ++threads) {
      attn::set_num_threads(threads);
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<float> dw(static_cast<std::size_t>(d * d), 1.0f);
        attn::gemm(dy.data(), true, x.data(), false, dw.data(), d, d, rows, true);
        if (first.empty()) {
          first = dw;
          // dW[i][j] = 1 + Σ_r dy[r][i] x[r][j]: spot-check one element.
          double want = 1.0;
          for (attn::index_t r = 0; r < rows; ++r)
            want += double(dy[static_cast<std::size_t>(r * d + 3)]) *
                    double(x[static_cast<std::size_t>(r * d + 5)]);
          CHECK(std::abs(dw[3 * d + 5] - want) < 1e-3);
        }
        CHECK(std::memcmp(first.data(), dw.data(), first.size() * sizeof(float)) == 0);
      }
    }
  }
}

#ifdef _OPENMP
TEST_CASE("SerialScope: one thread outside a team, the count restored after, nothing in a team") {
  const ThreadCountGuard guard;
  attn::set_num_threads(3);
  {
    const attn::SerialScope serial;
    CHECK(attn::num_threads() == 1);  // what OpenBLAS and Eigen size their threading by
    int team = 0;
#pragma omp parallel
    {
#pragma omp single
      team = omp_get_num_threads();
    }
    CHECK(team == 1);
  }
  CHECK(attn::num_threads() == 3);
  int inner = 0;
#pragma omp parallel num_threads(2)
  {
    const attn::SerialScope serial;  // inside a region: leaves the count alone
#pragma omp single
    inner = omp_get_max_threads();
  }
  CHECK(inner == 3);
  CHECK(attn::num_threads() == 3);
}
#endif
