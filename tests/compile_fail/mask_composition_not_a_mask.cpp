// Must not compile: mask::And composes masks only, and BadMask (no validate()) is not a
// MaskPolicy, so mask::And<Causal, BadMask> is rejected by the concept on And's parameters
// before any attention code sees it.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed and the program compiles.
#include <attn/attention/attention.hpp>

struct BadMask {
  bool allowed(attn::index_t, attn::index_t, attn::index_t j, attn::index_t, attn::index_t) const {
    return j % 2 == 0;
  }
  attn::TileKind tile(attn::index_t b, attn::index_t i0, attn::index_t i1, attn::index_t j0,
                      attn::index_t j1, attn::index_t tq, attn::index_t tk) const {
    return attn::classify_elementwise(*this, b, i0, i1, j0, j1, tq, tk);
  }
#ifdef ATTN_COMPILE_FAIL_FIXED
  void validate(attn::index_t, attn::index_t, attn::index_t) const {}
#endif
};

int main() {
  attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax,
                  attn::mask::And<attn::mask::Causal, BadMask>>
      op;
  (void)op;
}
