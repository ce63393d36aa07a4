// attn/attention/kernel_common.hpp: what every attention path shares (the fused online-softmax
// kernel, the materialised path, the linear path, the host runs of the CUDA block programs):
// dropout on the weights, decided by a hash of (seed, position) so that forward and backward
// agree without a stored mask; the checks of an entry point's q, k, v; Eigen's row-major
// matrix and column types as the paths name them.
// Does not compute attention: online_softmax.hpp, materialized.hpp and linear.hpp do.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>

#include "../autodiff/autodiff.hpp"
#include "../core/rng.hpp"
#include "geometry.hpp"
#include "score.hpp"

namespace attn {

namespace detail {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace detail

// Dropout on the attention weights: each weight is kept with probability 1 − p and scaled by
// 1/(1 − p). The decision for (b, h, i, j) is a hash of (seed, position), so forward and backward
// agree without storing a mask and the result does not depend on the thread count.
struct AttentionDropout {
  double p = 0.0;
  std::uint64_t seed = 0;

  bool active() const { return p > 0.0; }
  // Throws value_error unless p is in [0, 1]; `who` names the operation.
  void check(const char* who) const {
    ATTN_CHECK(p >= 0.0 && p <= 1.0, value_error, who, ": dropout p must be in [0, 1], got ", p);
  }
  DropoutMask mask() const { return DropoutMask(seed, p); }
  // Multiplies a row-major tile of weights, rows [row0, ...) of a head's Tq x tk weights and
  // columns [j0, ...), by the kept mask / (1 − p).
  template <class M>
  void apply(M& tile, index_t row0, index_t tk, index_t j0) const {
    if (tile.cols() == 0) return;
    const DropoutMask m = mask();
    for (index_t i = 0; i < tile.rows(); ++i)
      m.apply(&tile(i, 0), &tile(i, 0), tile.cols(),
              static_cast<std::uint64_t>((row0 + i) * tk + j0));
  }
};

namespace detail {

template <class T>
using Col = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// The checks every attention entry point makes: q, k, v are current Vars of one tape, and their
// shapes fit together (see attention_geometry).
template <class T>
AttentionGeometry checked_geometry(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                   const char* op, index_t key_length = 0) {
  Tape<T>& tape = q.tape();
  tape.check(q, op);
  tape.check(k, op);
  tape.check(v, op);
  return attention_geometry(q.shape(), k.shape(), v.shape(), op, key_length);
}

}  // namespace detail

}  // namespace attn
