// Must not compile: BadKernel has neither value(s), derivative(s, k) (a score kernel) nor
// feature_map = true with a map φ (a feature-map kernel), so it is not a KernelPolicy and
// attn::Attention rejects it.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed and the program compiles.
#include <attn/attention/attention.hpp>

struct BadKernel {
  static constexpr const char* name = "bad";
#ifdef ATTN_COMPILE_FAIL_FIXED
  static constexpr bool feature_map = false;
  static constexpr bool shift_invariant = false;
  double value(double s) const {
    return s * s;
  }
  double derivative(double s, double) const {
    return 2 * s;
  }
#endif
};

int main() {
  attn::Attention<attn::score::ScaledDot, BadKernel> op;
  (void)op;
}
