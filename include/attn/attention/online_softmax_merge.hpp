// attn/attention/online_softmax_merge.hpp: the state of a softmax over part of a row of scores
// (its max and its sum of exponentials) and the merge of two such parts, the step that lets the
// tiled kernels see keys one tile at a time. ATTN_HOST_DEVICE: the CUDA kernels and their host
// emulation share it. Does not touch tensors, tiles or values.
//
// For scores s_j over a set of keys J, the partial state is
//     m_J = max_{j∈J} s_j,   l_J = Σ_{j∈J} e^{s_j − m_J},
// and a partial output a_J = Σ_{j∈J} e^{s_j − m_J} v_j. Two disjoint parts merge exactly:
//     m = max(m_A, m_B),   l = e^{m_A − m} l_A + e^{m_B − m} l_B,   a = e^{m_A − m} a_A + e^{m_B −
//     m} a_B,
// and at the end o = a / l and log Σ_j e^{s_j} = m + log l. Subtracting a max keeps every
// exponent ≤ 0 (no overflow, whatever the scores). A masked key has s = −∞; a part with no
// allowed key has m = −∞, l = 0 and merges as the identity; a row with none at all gets l = 0.
#pragma once

#include <cmath>

#include "../core/host_device.hpp"
#include "kernel.hpp"

namespace attn {

// −∞ in A, usable in device code (std::numeric_limits is not, without relaxed constexpr).
template <class A>
ATTN_HOST_DEVICE A negative_infinity() {
  return -static_cast<A>(HUGE_VALF);
}

// e^{s − m}, the weight of score s relative to a running max m ≥ s: exactly 0 for a masked key
// (s = −∞), also when m = −∞ (then every s is −∞, and e^{−∞ − (−∞)} would be NaN).
// The exponential is kernel::Softmax's, the one definition of κ(s) = e^s.
template <class A>
ATTN_HOST_DEVICE A softmax_weight(A s, A m) {
  if (s == negative_infinity<A>()) return A(0);
  return kernel::Softmax{}.value(s - m);
}

template <class A>
struct SoftmaxPartial {
  A max = negative_infinity<A>();  // m_J
  A sum = A(0);                    // l_J = Σ e^{s_j − m_J}
};

template <class A>
struct SoftmaxMerged {
  SoftmaxPartial<A> state;  // the state over A ∪ B
  A scale_a, scale_b;       // e^{m_A − m}, e^{m_B − m}: multiply the partial outputs by these
};

// The merge above. Exact in real arithmetic; the order of merges changes only rounding.
template <class A>
ATTN_HOST_DEVICE SoftmaxMerged<A> merge(const SoftmaxPartial<A>& a, const SoftmaxPartial<A>& b) {
  const A m = a.max > b.max ? a.max : b.max;
  const A sa = softmax_weight(a.max, m), sb = softmax_weight(b.max, m);
  return {{m, a.sum * sa + b.sum * sb}, sa, sb};
}

// The partial state of n scores; writes e^{s_j − m} into w[j] when w is not null (the tile's
// unnormalised weights, what the partial output is summed with).
template <class A>
ATTN_HOST_DEVICE SoftmaxPartial<A> softmax_partial(const A* s, int n, A* w = nullptr) {
  SoftmaxPartial<A> p;
  for (int j = 0; j < n; ++j) p.max = s[j] > p.max ? s[j] : p.max;
  for (int j = 0; j < n; ++j) {
    const A e = softmax_weight(s[j], p.max);
    if (w) w[j] = e;
    p.sum += e;
  }
  return p;
}

// log Σ_j e^{s_j} = m + log l, or −∞ when no key is allowed (l = 0). Backward rebuilds each
// weight as e^{s − lse} = softmax_weight(s, lse).
template <class A>
ATTN_HOST_DEVICE A log_sum_exp(const SoftmaxPartial<A>& p) {
  return p.sum == A(0) ? negative_infinity<A>() : p.max + std::log(p.sum);
}

}  // namespace attn
