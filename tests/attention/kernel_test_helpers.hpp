// What the tests of the softmax kernel's features share (test_kernel_features.cpp,
// test_learned_bias.cpp, test_non_finite.cpp): seeded normal tensors, the four backward plans,
// and the tensors of the PyTorch reference file data/torch_kernels.txt.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <attn/attn.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "../torch_reference_file.hpp"

namespace kernel_tests {

// A tensor of shape s with independent N(0, scale²) entries drawn from `seed`.
template <class T>
attn::Tensor<T> normal_tensor(const attn::Shape& s, std::uint64_t seed, double scale = 1.0) {
  attn::Rng rng(seed);
  attn::Tensor<T> t(s);
  for (attn::index_t i = 0; i < t.numel(); ++i) t[i] = static_cast<T>(scale * rng.normal());
  return t;
}

// Every way the fused backward can run: weights saved or recomputed, one pass or two.
inline const std::vector<attn::AttentionBackward> backward_plans = {
    {attn::BackwardWeights::saved, attn::BackwardPasses::single},
    {attn::BackwardWeights::saved, attn::BackwardPasses::two},
    {attn::BackwardWeights::recomputed, attn::BackwardPasses::single},
    {attn::BackwardWeights::recomputed, attn::BackwardPasses::two}};

inline std::string plan_name(const attn::AttentionBackward& p) {
  return "plan " + std::to_string(int(p.weights)) + "/" + std::to_string(int(p.passes));
}

// grads(plan) -> tensors, for every backward plan: the same bits on 1 and on 2 threads.
template <class F>
void same_bits_on_1_and_2_threads(F&& grads) {
  const int saved = attn::num_threads();
  for (const auto& plan : backward_plans) {
    attn::set_num_threads(1);
    const auto one = grads(plan);
    attn::set_num_threads(2);
    const auto two = grads(plan);
    for (std::size_t i = 0; i < one.size(); ++i)
      CHECK_MESSAGE(std::equal(one[i].data(), one[i].data() + one[i].numel(), two[i].data()),
                    plan_name(plan), ", tensor ", i);
  }
  attn::set_num_threads(saved);
}

#ifdef ATTN_TESTS_SOURCE_DIR  // the test programs with DATA (tests/CMakeLists.txt)
inline const torch_reference::ReferenceFile& torch_kernels_file() {
  static const torch_reference::ReferenceFile file = torch_reference::load_reference(
      std::string(ATTN_TESTS_SOURCE_DIR) + "/attention/data/torch_kernels.txt",
      "attn-torch-kernels 1",
      "scripts/oracle-venv, then build/oracle-venv/bin/python "
      "tests/attention/torch_kernel_reference.py");
  return file;
}

// The tensor `name` of data/torch_kernels.txt (a failed REQUIRE when the file or it is missing).
inline const attn::Tensor<double>& torch_value(const std::string& name) {
  return torch_reference::tensor(torch_kernels_file(), name);
}
#endif

}  // namespace kernel_tests
