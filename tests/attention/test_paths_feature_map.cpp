// Attention paths against the reference: the feature map kernels.
#include "paths_fixture.hpp"

using namespace attn::test;

TEST_CASE_TEMPLATE("feature-map kernels: linear path = quadratic formula, every mask", T, float,
                   double) {
  check_all_masks<score::ScaledDot, kernel::EluPlusOne, T>();
  check_all_masks<score::Dot, kernel::Relu, T>();
  check_all_masks<score::ScaledDot, kernel::RandomFeatures, T>();
  check_all_masks<score::ScaledDot, kernel::TaylorExp, T>();
  // Linear path with the padded keys dropped; and a composition on the materialised path.
  check_combination<score::ScaledDot, kernel::EluPlusOne, LeftPaddedCausal, T>();
  check_combination<score::Dot, kernel::Relu, WindowOrCustom, T>();
}
