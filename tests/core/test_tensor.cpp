// Tests for attn::Tensor (core/tensor.hpp): construction, element access and its errors,
// copy/move, resize/reshape, alignment, the Eigen views, comparisons, casts, printing, and the
// seeded random factories.
#include <doctest/doctest.h>
#include <attn/core/tensor.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../test_util.hpp"

using attn::test::message_of;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A tensor whose element at flat index i is i (so a view's contents reveal where it points).
attn::Tensor<float> iota(const attn::Shape& shape) {
  attn::Tensor<float> t(shape);
  for (attn::index_t i = 0; i < t.numel(); ++i) t[i] = static_cast<float>(i);
  return t;
}

}  // namespace

TEST_CASE("Tensor: default is an empty rank-1 tensor") {
  const attn::Tensor<float> t;
  CHECK(t.rank() == 1);
  CHECK(t.shape() == attn::Shape{0});
  CHECK(t.numel() == 0);
  CHECK(t.empty());
  CHECK(t.begin() == t.end());
}

TEST_CASE("Tensor: a shape alone gives zeros") {
  // Allocate and dirty a buffer first, so a fresh tensor reusing freed memory would show it.
  { attn::Tensor<double> dirty(attn::Shape{3, 4, 5}, 7.0); }
  const attn::Tensor<double> t(attn::Shape{3, 4, 5});
  CHECK(t.rank() == 3);
  CHECK(t.numel() == 60);
  CHECK(t.dim(-1) == 5);
  CHECK_FALSE(t.empty());
  for (const double v : t) CHECK(v == 0.0);
  const attn::Tensor<int> z = attn::Tensor<int>::zeros({2, 2});
  for (const int v : z) CHECK(v == 0);
  const attn::Tensor<float> o = attn::Tensor<float>::ones({3});
  for (const float v : o) CHECK(v == 1.0f);
  const attn::Tensor<float> f = attn::Tensor<float>::full({2, 3}, 2.5f);
  CHECK(f.numel() == 6);
  for (const float v : f) CHECK(v == 2.5f);
}

TEST_CASE("Tensor: a rank-0 tensor holds one element") {
  attn::Tensor<float> s(attn::Shape{}, 3.0f);
  CHECK(s.rank() == 0);
  CHECK(s.numel() == 1);
  CHECK(s[0] == 3.0f);
  CHECK(s.at() == 3.0f);
  s() = 4.0f;
  CHECK(s[0] == 4.0f);
}

TEST_CASE("Tensor: values are stored in row-major order") {
  const attn::Tensor<float> t({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(t(0, 0) == 1);
  CHECK(t(0, 2) == 3);
  CHECK(t(1, 0) == 4);
  CHECK(t(1, 2) == 6);
  const std::vector<double> v{0.5, -1.5};
  const attn::Tensor<double> u(attn::Shape{2}, std::span<const double>(v));
  CHECK(u[0] == 0.5);
  CHECK(u[1] == -1.5);
}

TEST_CASE("Tensor: a wrong value count throws shape_error naming the shape") {
  CHECK_THROWS_AS(attn::Tensor<float>({2, 3}, {1, 2, 3, 4, 5}), attn::shape_error);
  const std::string msg = message_of<attn::shape_error>([] {
    attn::Tensor<float> t({2, 3}, {1, 2, 3, 4, 5, 6, 7});
  });
  CHECK(contains(msg, "7 values"));
  CHECK(contains(msg, "[2, 3]"));
  CHECK(contains(msg, "6 elements"));
}

TEST_CASE("Tensor: operator() and at() address every axis of a rank-4 tensor") {
  attn::Tensor<float> t = iota({2, 3, 4, 5});
  CHECK(t(0, 0, 0, 0) == 0);
  CHECK(t(1, 2, 3, 4) == 119);
  CHECK(t(1, 0, 2, 1) == 60 + 2 * 5 + 1);
  CHECK(t.at(1, 0, 2, 1) == t(1, 0, 2, 1));
  t.at(0, 1, 0, 3) = -1.0f;
  CHECK(t[20 + 3] == -1.0f);
  const attn::Tensor<float>& c = t;
  CHECK(c(1, 2, 3, 4) == 119);
  CHECK(c.at(1, 2, 3, 4) == 119);
  // Any integral index type works.
  CHECK(t(std::size_t{1}, 2u, std::int64_t{3}, short{4}) == 119);
}

TEST_CASE("Tensor: at() throws value_error out of range and shape_error on a wrong index count") {
  attn::Tensor<float> t({4, 3});
  CHECK_NOTHROW((void)t.at(3, 2));
  CHECK_THROWS_AS((void)t.at(4, 0), attn::value_error);
  CHECK_THROWS_AS((void)t.at(0, 3), attn::value_error);
  CHECK_THROWS_AS((void)t.at(-1, 0), attn::value_error);
  const std::string range = message_of<attn::value_error>([&] { (void)t.at(1, 5); });
  CHECK(contains(range, "index 5"));
  CHECK(contains(range, "axis 1"));
  CHECK(contains(range, "[4, 3]"));

  CHECK_THROWS_AS((void)t.at(1), attn::shape_error);
  CHECK_THROWS_AS((void)t.at(1, 1, 1), attn::shape_error);
  const std::string count = message_of<attn::shape_error>([&] { (void)t.at(0, 0, 0); });
  CHECK(contains(count, "3 indices"));
  CHECK(contains(count, "[4, 3]"));
  const attn::Tensor<float>& c = t;
  CHECK_THROWS_AS((void)c.at(0), attn::shape_error);
  CHECK_THROWS_AS((void)c.at(0, 9), attn::value_error);
}

TEST_CASE("Tensor: copies are deep") {
  attn::Tensor<float> a = iota({3, 4});
  attn::Tensor<float> b = a;
  CHECK(b.shape() == a.shape());
  CHECK(b.data() != a.data());
  CHECK(attn::max_abs_diff(a, b) == 0.0);
  b(1, 1) = 100.0f;
  CHECK(a(1, 1) == 5.0f);

  attn::Tensor<float> c({7});
  c = a;  // copy-assignment
  CHECK(c.shape() == attn::Shape{3, 4});
  c[0] = -3.0f;
  CHECK(a[0] == 0.0f);
  CHECK(c[11] == 11.0f);

  const attn::Tensor<float>& alias = c;
  c = alias;  // self-assignment leaves it intact
  CHECK(c[11] == 11.0f);
  CHECK(c.shape() == attn::Shape{3, 4});
}

TEST_CASE("Tensor: copy-assignment reuses a large enough buffer") {
  attn::Tensor<float> big({100});
  const float* p = big.data();
  const attn::Tensor<float> small = iota({2, 5});
  big = small;
  CHECK(big.data() == p);
  CHECK(big.shape() == attn::Shape{2, 5});
  CHECK(big[9] == 9.0f);
}

TEST_CASE("Tensor: moves transfer the buffer and leave a valid empty tensor") {
  attn::Tensor<float> a = iota({3, 4});
  const float* p = a.data();
  attn::Tensor<float> b = std::move(a);
  CHECK(b.data() == p);
  CHECK(b.shape() == attn::Shape{3, 4});
  CHECK(b[11] == 11.0f);
  // The moved-from tensor is usable: it can be queried, assigned and resized.
  CHECK(a.numel() == 0);  // NOLINT(bugprone-use-after-move): checking the documented state
  a = attn::Tensor<float>({2}, {1, 2});
  CHECK(a[1] == 2.0f);

  attn::Tensor<float> c({5});
  c = std::move(b);
  CHECK(c.data() == p);
  CHECK(c.shape() == attn::Shape{3, 4});
  b.resize({2, 2});  // NOLINT(bugprone-use-after-move)
  b.fill(1.0f);
  CHECK(b.numel() == 4);
}

TEST_CASE("Tensor: resize keeps the buffer when the new shape is not larger") {
  attn::Tensor<float> t({8, 8});
  const float* p = t.data();
  t.resize({4, 4});
  CHECK(t.data() == p);
  CHECK(t.shape() == attn::Shape{4, 4});
  t.resize({2, 2, 16});  // same element count as the original
  CHECK(t.data() == p);
  t.resize({65});  // larger: a new buffer
  CHECK(t.numel() == 65);
  t.fill(1.0f);
  CHECK(t[64] == 1.0f);
}

TEST_CASE("Tensor: reshape keeps the elements, and a different count throws shape_error") {
  attn::Tensor<float> t = iota({2, 6});
  const float* p = t.data();
  t.reshape({3, 4});
  CHECK(t.data() == p);
  CHECK(t(2, 3) == 11.0f);
  CHECK(t(1, 0) == 4.0f);

  const attn::Tensor<float> r = t.reshaped({2, 2, 3});
  CHECK(r.shape() == attn::Shape{2, 2, 3});
  CHECK(r.data() != t.data());  // reshaped() copies
  CHECK(r(1, 1, 2) == 11.0f);
  CHECK(t.shape() == attn::Shape{3, 4});  // the original is unchanged

  CHECK_THROWS_AS(t.reshape({5, 2}), attn::shape_error);
  CHECK(t.shape() == attn::Shape{3, 4});  // a failed reshape changes nothing
  const std::string msg = message_of<attn::shape_error>([&] { (void)t.reshaped({5, 3}); });
  CHECK(contains(msg, "[3, 4]"));
  CHECK(contains(msg, "[5, 3]"));
  CHECK(contains(msg, "12 elements"));
  CHECK(contains(msg, "15 elements"));
}

TEST_CASE("Tensor: data() is 64-byte aligned") {
  for (const attn::index_t n : {1, 3, 17, 1000, 4097}) {
    const attn::Tensor<float> f({n});
    const attn::Tensor<double> d({n});
    const attn::Tensor<std::int32_t> i({n});
    CHECK(reinterpret_cast<std::uintptr_t>(f.data()) % 64 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(d.data()) % 64 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(i.data()) % 64 == 0);
  }
  attn::Tensor<float> t({3});
  t.resize({5000});
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
}

TEST_CASE("Tensor: fill, zero and span") {
  attn::Tensor<double> t({2, 3});
  t.fill(1.25);
  CHECK(t.span().size() == 6);
  for (const double v : t.span()) CHECK(v == 1.25);
  t.zero();
  for (const double v : t) CHECK(v == 0.0);
}

TEST_CASE("Tensor: matrix() views a rank-2 tensor as a row-major matrix") {
  attn::Tensor<float> t = iota({3, 4});
  auto m = t.matrix();
  CHECK(m.rows() == 3);
  CHECK(m.cols() == 4);
  CHECK(m(2, 1) == t(2, 1));
  CHECK(m(1, 3) == 7.0f);
  m(0, 2) = -5.0f;  // writes through
  CHECK(t(0, 2) == -5.0f);
  const attn::Tensor<float>& c = t;
  CHECK(c.matrix()(2, 3) == 11.0f);
  // Eigen arithmetic on the view: row sums.
  const Eigen::VectorXf sums = c.matrix().rowwise().sum();
  CHECK(sums(2) == doctest::Approx(8 + 9 + 10 + 11));
}

TEST_CASE("Tensor: matrix() views a rank-1 tensor as one row") {
  attn::Tensor<float> t = iota({5});
  auto m = t.matrix();
  CHECK(m.rows() == 1);
  CHECK(m.cols() == 5);
  CHECK(m(0, 4) == 4.0f);
}

TEST_CASE("Tensor: matrix() on rank 0, 3 or 4 throws shape_error") {
  attn::Tensor<float> t3({2, 3, 4});
  CHECK_THROWS_AS((void)t3.matrix(), attn::shape_error);
  const std::string msg = message_of<attn::shape_error>([&] { (void)t3.matrix(); });
  CHECK(contains(msg, "[2, 3, 4]"));
  attn::Tensor<float> t0(attn::Shape{});
  CHECK_THROWS_AS((void)t0.matrix(), attn::shape_error);
}

TEST_CASE("Tensor: matrix(b) views slice b of a rank-3 tensor") {
  attn::Tensor<float> t = iota({3, 2, 4});  // [B, M, N]
  for (attn::index_t b = 0; b < 3; ++b) {
    auto m = t.matrix(b);
    REQUIRE(m.rows() == 2);
    REQUIRE(m.cols() == 4);
    for (attn::index_t i = 0; i < 2; ++i)
      for (attn::index_t j = 0; j < 4; ++j) CHECK(m(i, j) == t(b, i, j));
  }
  t.matrix(1)(1, 2) = -1.0f;
  CHECK(t(1, 1, 2) == -1.0f);
  const attn::Tensor<float>& c = t;
  CHECK(c.matrix(2)(0, 0) == 16.0f);
  CHECK_THROWS_AS((void)t.matrix(3), attn::value_error);
  CHECK_THROWS_AS((void)t.matrix(-1), attn::value_error);
  CHECK_THROWS_AS((void)t.matrix(0, 0), attn::shape_error);  // rank 3 needs one index
}

TEST_CASE("Tensor: matrix(b, h) views slice (b, h) of a rank-4 tensor") {
  attn::Tensor<float> t = iota({2, 3, 4, 5});  // [B, H, T, Dh]
  for (attn::index_t b = 0; b < 2; ++b)
    for (attn::index_t h = 0; h < 3; ++h) {
      auto m = t.matrix(b, h);
      REQUIRE(m.rows() == 4);
      REQUIRE(m.cols() == 5);
      for (attn::index_t i = 0; i < 4; ++i)
        for (attn::index_t j = 0; j < 5; ++j) CHECK(m(i, j) == t(b, h, i, j));
    }
  t.matrix(1, 2)(3, 4) = 0.5f;
  CHECK(t(1, 2, 3, 4) == 0.5f);
  const attn::Tensor<float>& c = t;
  CHECK(c.matrix(1, 0)(0, 0) == 60.0f);
  CHECK_THROWS_AS((void)t.matrix(0, 3), attn::value_error);
  CHECK_THROWS_AS((void)t.matrix(2, 0), attn::value_error);
  CHECK_THROWS_AS((void)t.matrix(0), attn::shape_error);  // rank 4 needs two indices
  const std::string msg = message_of<attn::value_error>([&] { (void)t.matrix(0, 7); });
  CHECK(contains(msg, "index 7"));
  CHECK(contains(msg, "[2, 3, 4, 5]"));
}

TEST_CASE("Tensor: rows() folds the leading axes into rows") {
  attn::Tensor<float> t = iota({2, 3, 4});
  auto r = t.rows();
  CHECK(r.rows() == 6);
  CHECK(r.cols() == 4);
  CHECK(r(4, 1) == t(1, 1, 1));
  r(5, 3) = -2.0f;
  CHECK(t(1, 2, 3) == -2.0f);
  const attn::Tensor<float> v = iota({7});
  CHECK(v.rows().rows() == 1);
  CHECK(v.rows().cols() == 7);
  const attn::Tensor<float> e({0, 4});
  CHECK(e.rows().rows() == 0);
  CHECK(e.rows().cols() == 4);
}

TEST_CASE("Tensor: array() views every element as one column") {
  attn::Tensor<double> t({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(t.array().size() == 6);
  CHECK(t.array().sum() == 21.0);
  t.array() *= 2.0;
  CHECK(t(1, 2) == 12.0);
}

TEST_CASE("max_abs_diff and allclose") {
  const attn::Tensor<double> a({3}, {1.0, 2.0, 3.0});
  const attn::Tensor<double> b({3}, {1.0, 2.5, 2.0});
  CHECK(attn::max_abs_diff(a, b) == 1.0);
  CHECK(attn::max_abs_diff(a, a) == 0.0);
  CHECK_THROWS_AS((void)attn::max_abs_diff(a, attn::Tensor<double>({1, 3})), attn::shape_error);
  const std::string msg = message_of<attn::shape_error>([&] {
    (void)attn::max_abs_diff(a, attn::Tensor<double>({1, 3}));
  });
  CHECK(contains(msg, "[3]"));
  CHECK(contains(msg, "[1, 3]"));

  CHECK(attn::allclose(a, a));
  CHECK_FALSE(attn::allclose(a, b));
  const attn::Tensor<double> near({3}, {1.0 + 1e-9, 2.0 - 1e-9, 3.0});
  CHECK(attn::allclose(a, near));
  // rtol scales with |b|; atol is absolute.
  const attn::Tensor<double> big({1}, {1000.0}), big2({1}, {1000.5});
  CHECK_FALSE(attn::allclose(big, big2));
  CHECK(attn::allclose(big, big2, 1e-3));
  CHECK(attn::allclose(big, big2, 0.0, 0.5));
  CHECK_FALSE(attn::allclose(big, big2, 0.0, 0.49));
  // Different shapes are never close, and NaN is never close (not even to itself).
  CHECK_FALSE(attn::allclose(a, a.reshaped({1, 3})));
  attn::Tensor<double> nan = a;
  nan[1] = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(attn::allclose(nan, nan));
  CHECK_FALSE(attn::allclose(a, nan));
}

TEST_CASE("cast converts the element type") {
  const attn::Tensor<double> d({2, 2}, {1.5, -2.25, 3.0, 1e-3});
  const attn::Tensor<float> f = attn::cast<float>(d);
  CHECK(f.shape() == d.shape());
  CHECK(f(0, 1) == -2.25f);
  CHECK(f(1, 1) == static_cast<float>(1e-3));
  const attn::Tensor<int> i = attn::cast<int>(d);
  CHECK(i(0, 0) == 1);
  CHECK(i(0, 1) == -2);
  const attn::Tensor<double> back = attn::cast<double>(attn::cast<float>(attn::cast<int>(d)));
  CHECK(back(1, 0) == 3.0);
}

TEST_CASE("operator<< prints the shape and the elements, eliding the middle of large tensors") {
  std::ostringstream os;
  os << attn::Tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(os.str() == "Tensor[2, 3]{1, 2, 3, 4, 5, 6}");

  std::ostringstream small_ints;
  small_ints << attn::Tensor<std::int8_t>({2}, {65, -1});  // printed as numbers, not characters
  CHECK(small_ints.str() == "Tensor[2]{65, -1}");

  std::ostringstream scalar;
  scalar << attn::Tensor<double>(attn::Shape{}, 0.5);
  CHECK(scalar.str() == "Tensor[]{0.5}");

  std::ostringstream large;
  attn::Tensor<int> big({25});
  for (attn::index_t i = 0; i < 25; ++i) big[i] = static_cast<int>(i);
  large << big;
  CHECK(large.str() ==
        "Tensor[25]{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ..., 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}");

  std::ostringstream empty;
  empty << attn::Tensor<float>();
  CHECK(empty.str() == "Tensor[0]{}");
}

TEST_CASE("randn and uniform are reproducible from the seed and differ across seeds") {
  attn::Rng r1(123), r2(123), r3(124);
  const auto a = attn::Tensor<float>::randn({4, 8}, r1);
  const auto b = attn::Tensor<float>::randn({4, 8}, r2);
  const auto c = attn::Tensor<float>::randn({4, 8}, r3);
  CHECK(attn::max_abs_diff(a, b) == 0.0);
  CHECK(attn::max_abs_diff(a, c) > 0.1);
  // The next draws continue the stream: a second tensor from the same rng differs from the first.
  const auto a2 = attn::Tensor<float>::randn({4, 8}, r1);
  CHECK(attn::max_abs_diff(a, a2) > 0.1);

  attn::Rng u1(9), u2(9), u3(10);
  const auto x = attn::Tensor<double>::uniform({100}, u1, -2.0, 3.0);
  const auto y = attn::Tensor<double>::uniform({100}, u2, -2.0, 3.0);
  const auto z = attn::Tensor<double>::uniform({100}, u3, -2.0, 3.0);
  CHECK(attn::max_abs_diff(x, y) == 0.0);
  CHECK(attn::max_abs_diff(x, z) > 0.1);
  for (const double v : x) {
    CHECK(v >= -2.0);
    CHECK(v < 3.0);
  }
  // uniform() draws exactly one Rng::uniform per element, in row-major order.
  attn::Rng ref(9);
  for (attn::index_t i = 0; i < 100; ++i) CHECK(x[i] == ref.uniform(-2.0, 3.0));
}

TEST_CASE(
    "randn: the sample mean and standard deviation are near 0 and 1 (and honour mean/stddev)") {
  attn::Rng rng(2024);
  const auto t = attn::Tensor<double>::randn({100000}, rng);
  double sum = 0.0, sq = 0.0;
  for (const double v : t) {
    sum += v;
    sq += v * v;
  }
  const double n = static_cast<double>(t.numel());
  const double mean = sum / n;
  const double stddev = std::sqrt(sq / n - mean * mean);
  // Standard error of the mean is 1/sqrt(1e5) ~ 0.0032; of the std ~ 0.0022. Allow ~5 sigma.
  CHECK(std::abs(mean) < 0.016);
  CHECK(std::abs(stddev - 1.0) < 0.012);

  const auto s = attn::Tensor<float>::randn({100000}, rng, 3.0, 0.5);
  double ssum = 0.0, ssq = 0.0;
  for (const float v : s) {
    ssum += v;
    ssq += static_cast<double>(v) * v;
  }
  const double smean = ssum / n;
  CHECK(std::abs(smean - 3.0) < 0.008);
  CHECK(std::abs(std::sqrt(ssq / n - smean * smean) - 0.5) < 0.006);
}

TEST_CASE(
    "Tensor: a shape whose bytes do not fit an address space is a shape_error, not a 0-byte "
    "buffer") {
  const attn::index_t big = attn::index_t{1} << 31;
  // 2^62 floats are 2^64 bytes: the byte count used to wrap to 0 and the first write to crash.
  CHECK_THROWS_WITH_AS(attn::Tensor<float>({big, big}),
                       "Tensor: [2147483648, 2147483648] holds 4611686018427387904 elements of 4 "
                       "bytes, more bytes than an address space has",
                       attn::shape_error);
  CHECK_THROWS_AS(attn::Tensor<double>({big, big / 2}), attn::shape_error);
  attn::Tensor<float> t({2, 3});
  CHECK_THROWS_AS(t.resize(attn::Shape{big, big}), attn::shape_error);
  CHECK(t.numel() == 6);  // unchanged by the refused resize
}
