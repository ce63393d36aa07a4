// Must not compile: a MultiHeadAttention with Heads<0>; Heads<N> static_asserts N > 0.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed (Heads<1>) and the program compiles.
#include <attn/attention/multi_head.hpp>

#ifdef ATTN_COMPILE_FAIL_FIXED
constexpr int kHeads = 1;
#else
constexpr int kHeads = 0;
#endif

int main() {
  using Mha = attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax,
                                       attn::mask::Causal, attn::Heads<kHeads>>;
  Mha mha(attn::MultiHeadConfig{.d_model = 8});
  (void)mha;
}
