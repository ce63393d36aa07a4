// Attention paths against the reference: the softmax kernels.
#include "paths_fixture.hpp"

using namespace attn::test;

TEST_CASE_TEMPLATE("softmax attention: fused path = reference, every score and mask", T, float,
                   double) {
  check_all_masks<score::Dot, kernel::Softmax, T>();
  check_all_masks<score::ScaledDot, kernel::Softmax, T>();
  check_all_masks<score::NegSqEuclidean, kernel::Softmax, T>();
  // ALiBi's position bias in the tile loop: the causal mask it is made for, no mask (the
  // symmetric distance) and padding (rows with no key).
  check_combination<score::Alibi, kernel::Softmax, mask::Causal, T>();
  check_combination<score::Alibi, kernel::Softmax, mask::None, T>();
  check_combination<score::Alibi, kernel::Softmax, mask::Padding, T>();
}

TEST_CASE("softmax attention: fused path = reference, composed masks") {
  // The left-padded batch in both precisions; Or in double (finite differences) only. (The
  // materialised run inside each check covers that path with the same masks.)
  check_combination<score::ScaledDot, kernel::Softmax, LeftPaddedCausal, float>();
  check_combination<score::ScaledDot, kernel::Softmax, LeftPaddedCausal, double>();
  check_combination<score::NegSqEuclidean, kernel::Softmax, WindowOrCustom, double>();
}

TEST_CASE("a left-padded causal batch: each prompt's rows equal the prompt alone (softmax)") {
  attn::Attention<score::ScaledDot, kernel::Softmax, LeftPaddedCausal> fused;
  check_left_padded(fused);
  check_left_padded(fused, true);
}
