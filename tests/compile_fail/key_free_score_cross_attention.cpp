// Must not compile: the dense synthesizer's scores come from the queries alone, so there are no
// keys to take from a memory; the cross-attention call static_asserts.
// With -DATTN_COMPILE_FAIL_FIXED the one defect is fixed (self-attention) and the program compiles.
#include <attn/attention/multi_head.hpp>

int main() {
  attn::SynthesizerAttention<> synth({.d_model = 8, .heads = 2, .max_length = 4});
  attn::Tape<float> tape;
  const attn::Var<float> x = tape.leaf(attn::Tensor<float>(attn::Shape{1, 4, 8}));
#ifdef ATTN_COMPILE_FAIL_FIXED
  (void)synth(x);
#else
  (void)synth(x, x, attn::mask::Causal{});
#endif
}
