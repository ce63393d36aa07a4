// clear() keeps the tape's buffers: a steady-state training step allocates nothing.
// Replaces the global operator new to count allocations, so it is an executable of its own.
#include <doctest/doctest.h>

#include <atomic>
#include <attn/attn.hpp>
#include <cstdlib>
#include <new>

#include "mlp_fixture.hpp"

namespace {
std::atomic<long> allocations{0};
std::atomic<bool> counting{false};
}  // namespace

// GCC cannot see that these replace the global operators and warns that free() does not match new.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  if (counting) ++allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  if (counting) ++allocations;
  const auto al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

using attn::Tensor;

TEST_CASE("a steady-state training step allocates nothing") {
  attn::Rng rng(2);
  attn::test::Mlp mlp(rng);
  attn::Tape<float> tape;
  const Tensor<float> x = Tensor<float>::randn({64, 16}, rng);
  Tensor<std::int32_t> y({64});
  for (attn::index_t i = 0; i < 64; ++i) y[i] = static_cast<std::int32_t>(i % 4);
  mlp.step(tape, x, y, rng);
  mlp.step(tape, x, y, rng);
  allocations = 0;
  counting = true;
  const float loss = mlp.step(tape, x, y, rng);
  counting = false;
  CHECK(allocations.load() == 0);
  CHECK(std::isfinite(loss));
}

TEST_CASE("the counter sees allocations (the test above could fail)") {
  allocations = 0;
  counting = true;
  attn::Tensor<float> t({1000});
  counting = false;
  CHECK(allocations.load() >= 1);
}
