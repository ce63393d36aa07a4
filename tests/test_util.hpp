// Helpers shared by the unit tests. Does not hold fixtures of one layer (those live beside their
// tests, e.g. tests/autodiff/mlp_fixture.hpp).
#pragma once

#include <attn/core/error.hpp>
#include <string>

namespace attn::test {

// True in a build with AddressSanitizer (the asan preset). Training-length tests that add nothing
// a sanitizer could find beyond the shorter tests of the same code skip themselves there
// (`TEST_CASE("..." * doctest::skip(attn::test::under_sanitizer))`): ASan makes them 5-10x slower.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool under_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool under_sanitizer = true;
#else
inline constexpr bool under_sanitizer = false;
#endif
#else
inline constexpr bool under_sanitizer = false;
#endif

// The message of the exception of type E that `f` throws, or "" when it throws nothing.
template <class E = attn::error, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace attn::test
