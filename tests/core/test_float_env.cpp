// Tests for set_denormals (core/float_env.hpp): flushing makes subnormal results and inputs zero on
// the calling thread and on every thread of the OpenMP pool, keeping restores IEEE gradual
// underflow everywhere, and the names parse.
#include <doctest/doctest.h>

#include <attn/core/float_env.hpp>
#include <attn/core/parallel.hpp>
#include <limits>
#include <vector>

#include "../test_util.hpp"

namespace float_env_tests {

// Computed at run time (volatile), so that the compiler cannot fold them in its own arithmetic.
float subnormal_product() {
  volatile float a = 1e-20f, b = 1e-20f;
  return a * b;  // 1e-40: below the smallest normal float, 1.18e-38
}
float subnormal_input_times_one() {
  volatile float d = 1e-40f, one = 1.0f;
  return d * one;
}

// Each thread of the pool's results, in one parallel region of num_threads() threads.
std::vector<float> on_every_thread(float (*f)()) {
  std::vector<float> out(static_cast<std::size_t>(attn::num_threads()), -1.0f);
#ifdef _OPENMP
#pragma omp parallel num_threads(attn::num_threads())
  out[static_cast<std::size_t>(omp_get_thread_num())] = f();
#else
  out[0] = f();
#endif
  return out;
}

struct RestoreKeep {
  ~RestoreKeep() { attn::set_denormals(attn::Denormals::keep); }
};

}  // namespace float_env_tests

TEST_CASE(
    "set_denormals: flush zeroes subnormal results and inputs on every thread; keep undoes it") {
  using namespace float_env_tests;
  if (!attn::can_flush_denormals()) {
    CHECK_THROWS_AS(attn::set_denormals(attn::Denormals::flush), attn::value_error);
    return;
  }
  const RestoreKeep restore;
  attn::set_num_threads(2);
  REQUIRE(attn::denormals() == attn::Denormals::keep);  // every program starts so
  REQUIRE(subnormal_product() > 0.0f);
  REQUIRE(subnormal_product() < std::numeric_limits<float>::min());

  attn::set_denormals(attn::Denormals::flush);
  CHECK(attn::denormals() == attn::Denormals::flush);
  CHECK(subnormal_product() == 0.0f);
  CHECK(subnormal_input_times_one() == 0.0f);
  for (float x : on_every_thread(subnormal_product)) CHECK(x == 0.0f);
  for (float x : on_every_thread(subnormal_input_times_one)) CHECK(x == 0.0f);
  // Normal numbers are untouched.
  volatile float small = 2e-38f, two = 2.0f;
  CHECK(small * two == 4e-38f);

  attn::set_denormals(attn::Denormals::keep);
  CHECK(attn::denormals() == attn::Denormals::keep);
  CHECK(subnormal_product() > 0.0f);
  for (float x : on_every_thread(subnormal_product)) CHECK(x > 0.0f);
  for (float x : on_every_thread(subnormal_input_times_one)) CHECK(x > 0.0f);
}

TEST_CASE("denormals names: keep and flush, anything else is a value_error") {
  CHECK(attn::parse_denormals("flush") == attn::Denormals::flush);
  CHECK(attn::parse_denormals("keep") == attn::Denormals::keep);
  CHECK(attn::denormals_name(attn::Denormals::flush) == "flush");
  CHECK(attn::denormals_name(attn::Denormals::keep) == "keep");
  CHECK(attn::test::message_of<attn::value_error>([] { attn::parse_denormals("ftz"); }) ==
        "denormals: 'ftz' is neither keep nor flush");
}
