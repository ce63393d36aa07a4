// Must not compile: the additive score is pairwise (w_hᵀ tanh(a_i + c_j)), so its weights come from
// a masked softmax of materialised scores; MultiHeadAttention static_asserts kernel::Softmax.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed (kernel::Softmax) and the program
// compiles.
#include <attn/attention/multi_head.hpp>

#ifdef ATTN_COMPILE_FAIL_FIXED
using Kernel = attn::kernel::Softmax;
#else
using Kernel = attn::kernel::Polynomial<2>;
#endif

int main() {
  attn::MultiHeadAttention<attn::score::Additive, Kernel> mha({.d_model = 8, .heads = 2});
  (void)mha;
}
