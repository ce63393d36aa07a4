// Helpers shared by the unit tests. Does not hold fixtures of one layer (those live beside their
// tests, e.g. tests/autodiff/mlp_fixture.hpp).
#pragma once

#include <attn/core/error.hpp>
#include <string>

namespace attn::test {

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
