// Smallest downstream program: the umbrella header, a product (attn::gemm) and a checkpoint round
// trip in memory (the safetensors parser). Built twice by the consumer tests: header-only
// (attn::attn) and against the compiled part (attn::compiled), where both come from the library.
// Exit code 0 only if the library behaves.
#include <attn/attn.hpp>
#include <attn/io/safetensors.hpp>

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
