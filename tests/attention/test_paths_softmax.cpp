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

TEST_CASE_TEMPLATE("softmax attention: fused path = reference, composed masks", T, float, double) {
  check_combination<score::ScaledDot, kernel::Softmax, LeftPaddedCausal, T>();
  check_combination<score::NegSqEuclidean, kernel::Softmax, WindowOrCustom, T>();
}
