// Smallest downstream program: includes the umbrella header, uses Tensor.
// Exit code 0 only if the library behaves; used by the consumer_* ctest tests.
#include <attn/attn.hpp>

#include <cstdio>

int main() {
  attn::Tensor<float> t({2, 3});
  t.fill(1.5f);
  if (t.numel() != 6) {
    std::printf("consumer: expected numel() == 6, got %zu\n", static_cast<std::size_t>(t.numel()));
    return 1;
  }
  std::printf("consumer: ok\n");
  return 0;
}
