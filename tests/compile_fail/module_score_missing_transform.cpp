// Must not compile: HalfScore says it transforms queries and keys before a quadratic form but
// has no transform_k, so it is not a MultiHeadScore and MultiHeadAttention<HalfScore> is rejected
// by the concept on its first parameter.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed and the program compiles.
#include <attn/attention/multi_head.hpp>

struct HalfScore {
  static constexpr const char* name = "half";
  static constexpr attn::ScoreForm form = attn::ScoreForm::transformed;
  using inner = attn::score::ScaledDot;
  template <class P, class T>  // P: the score's parameters (none here)
  attn::Var<T> transform_q(P&, const attn::Var<T>& q, attn::index_t) const {
    return q;
  }
#ifdef ATTN_COMPILE_FAIL_FIXED
  template <class P, class T>
  attn::Var<T> transform_k(P&, const attn::Var<T>& k, attn::index_t) const {
    return k;
  }
#endif
  template <class P>
  double reference(const P&, attn::index_t, attn::index_t, const double*, const double*,
                   attn::index_t, attn::index_t, attn::index_t) const {
    return 0.0;
  }
};

int main() {
  attn::MultiHeadAttention<HalfScore> mha({.d_model = 8, .heads = 2});
  (void)mha;
}
