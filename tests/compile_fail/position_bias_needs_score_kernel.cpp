// Must not compile: ALiBi adds −m_h |i − j| to each score, and linear attention (a feature-map
// kernel) never forms a score per pair; MultiHeadAttention static_asserts a score kernel.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed (kernel::Softmax) and the program
// compiles.
#include <attn/attention/multi_head.hpp>

#ifdef ATTN_COMPILE_FAIL_FIXED
using Kernel = attn::kernel::Softmax;
#else
using Kernel = attn::kernel::EluPlusOne;
#endif

int main() {
  attn::MultiHeadAttention<attn::score::Alibi, Kernel, attn::mask::Causal> mha(
      {.d_model = 8, .heads = 2});
  (void)mha;
}
