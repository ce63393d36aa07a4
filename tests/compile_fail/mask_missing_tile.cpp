// Must not compile: BadMask answers allowed() but not tile(), so it is not a MaskPolicy and
// attn::Attention<ScaledDot, Softmax, BadMask> is rejected by the concept.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed and the program compiles.
#include <attn/attention/attention.hpp>

struct BadMask {
  bool allowed(attn::index_t, attn::index_t i, attn::index_t j, attn::index_t,
               attn::index_t) const {
    return j <= i;
  }
#ifdef ATTN_COMPILE_FAIL_FIXED
  attn::TileKind tile(attn::index_t b, attn::index_t i0, attn::index_t i1, attn::index_t j0,
                      attn::index_t j1, attn::index_t tq, attn::index_t tk) const {
    return attn::classify_elementwise(*this, b, i0, i1, j0, j1, tq, tk);
  }
#endif
  void validate(attn::index_t, attn::index_t, attn::index_t) const {}
};

int main() {
  attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax, BadMask> op;
  (void)op;
}
