// Smallest downstream program: the umbrella header, a product (attn::gemm), causal attention on
// its fused and materialised paths, and a checkpoint round trip in memory (the safetensors
// parser). Built twice by the consumer tests: header-only (attn::attn) and against the compiled
// part (attn::compiled), where all of these come from the library.
// Exit code 0 only if the library behaves.
#include <attn/attn.hpp>
#include <attn/io/safetensors.hpp>

#include <cmath>
#include <cstdio>

int main() {
  attn::Tensor<float> a({2, 3}), b({3, 2}), c({2, 2});
  for (attn::index_t i = 0; i < 6; ++i) {
    a[i] = float(i + 1);  // [[1 2 3] [4 5 6]]
    b[i] = 1.0f;
  }
  attn::gemm(a.data(), false, b.data(), false, c.data(), 2, 2, 3);
  if (c(0, 0) != 6.0f || c(1, 1) != 15.0f) {
    std::printf("consumer: gemm gave %g and %g, expected 6 and 15\n", c(0, 0), c(1, 1));
    return 1;
  }
  // Causal attention over two positions: the first query sees only the first key, so its output
  // is the first value row; both paths agree on the second.
  attn::Tape<float> tape;
  attn::Tensor<float> qkv({1, 1, 2, 2});
  for (attn::index_t i = 0; i < 4; ++i) qkv[i] = 0.5f * float(i) - 0.7f;
  const attn::Var<float> x = tape.leaf(qkv);
  attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal> op;
  const attn::Tensor<float> fused = op(x, x, x).value();
  const attn::Tensor<float> materialized = op.materialized(x, x, x).value();
  if (fused[0] != qkv[0] || fused[1] != qkv[1] || std::abs(fused[2] - materialized[2]) > 1e-6f ||
      std::abs(fused[3] - materialized[3]) > 1e-6f) {
    std::printf("consumer: causal attention gave %g %g | %g %g (materialised %g %g)\n", fused[0],
                fused[1], fused[2], fused[3], materialized[2], materialized[3]);
    return 1;
  }
  attn::io::Safetensors file;
  file.metadata["who"] = "consumer";
  file.put("c", c);
  const auto bytes = attn::io::serialize_safetensors(file);
  const attn::io::Safetensors back = attn::io::parse_safetensors(bytes, "memory");
  if (back.metadata.at("who") != "consumer" || back.get<float>("c")(1, 1) != 15.0f) {
    std::printf("consumer: the checkpoint round trip lost its content\n");
    return 1;
  }
  std::printf("consumer: ok (%s)\n",
#ifdef ATTN_COMPILED
              "attn::compiled"
#else
              "header-only"
#endif
  );
  return 0;
}
