// Attention paths against the reference: the polynomial kernels.
#include "paths_fixture.hpp"

using namespace attn::test;

TEST_CASE_TEMPLATE("polynomial kernels: materialised path = reference", T, float, double) {
  check_all_masks<score::ScaledDot, kernel::Polynomial<2>, T>();
  check_all_masks<score::NegSqEuclidean, kernel::Polynomial<2>, T>();
  // An odd degree gives signed weights whose normaliser can come close to 0, an ill-conditioned
  // quotient that float cannot hold to the tolerance; it is checked in double only.
  if constexpr (std::is_same_v<T, double>) {
    check_all_masks<score::Dot, kernel::Polynomial<3>, T>();
    check_combination<score::Alibi, kernel::Polynomial<2>, mask::Causal,
                      T>();  // bias, materialised
  }
}
