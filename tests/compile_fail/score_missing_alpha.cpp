// Must not compile: BadScore lacks alpha(d), so it is not a ScorePolicy and
// attn::Attention<BadScore> is rejected by the concept on its first parameter.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed and the program compiles.
#include <attn/attention/attention.hpp>

struct BadScore {
  static constexpr const char* name = "bad";
  static constexpr double beta_q = 0, beta_k = 0;
#ifdef ATTN_COMPILE_FAIL_FIXED
  double alpha(attn::index_t) const {
    return 1.0;
  }
#endif
  template <class T>
  double operator()(const T*, const T*, attn::index_t) const {
    return 0.0;
  }
};

int main() {
  attn::Attention<BadScore> op;
  (void)op;
}
