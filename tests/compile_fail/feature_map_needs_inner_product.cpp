// Must not compile: a feature-map kernel computes φ(q)·φ(k), which cannot express the
// ‖q − k‖² of NegSqEuclidean; Attention static_asserts an inner-product score.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed (score::Dot) and the program compiles.
#include <attn/attention/attention.hpp>

#ifdef ATTN_COMPILE_FAIL_FIXED
using Score = attn::score::Dot;
#else
using Score = attn::score::NegSqEuclidean;
#endif

int main() {
  attn::Attention<Score, attn::kernel::EluPlusOne> op;
  (void)op;
}
