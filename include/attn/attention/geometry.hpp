// attn/attention/geometry.hpp: the sizes of one attention call and the row-major offsets of its
// per-head tensors, one struct for every path (the reference loops, the fused CPU kernel, the
// materialised and linear paths, the CUDA block programs and their host emulation).
// Does not allocate, record on a tape or know tile sizes; the paths that tile add their own.
//
// q [B, H, Tq, Dh], k [B, Hk, Lk, Dh], v [B, Hk, Lk, Dv], o [B, H, Tq, Dv], per-row vectors
// [B, H, Tq]; query head h reads key/value head h / (H / Hk) (multi- or grouped-query). A call
// attends to the first Tk of the Lk rows of each key/value head: Lk > Tk when k and v are a
// decoding cache with spare capacity (KVCache grows by doubling), so it is read in place.
#pragma once

#include "../core/error.hpp"
#include "../core/host_device.hpp"
#include "../core/shape.hpp"

namespace attn::detail {

struct AttentionGeometry {
  index_t B = 0, H = 0, Hk = 0, Tq = 0, Tk = 0, Dh = 0, Dv = 0;
  index_t Lk = 0;  // rows per key/value head in memory; 0 means Tk (k and v hold no spare rows)

  ATTN_HOST_DEVICE index_t group() const { return H / Hk; }
  ATTN_HOST_DEVICE index_t key_rows() const { return Lk > 0 ? Lk : Tk; }
  ATTN_HOST_DEVICE index_t q_off(index_t b, index_t h, index_t i) const {
    return ((b * H + h) * Tq + i) * Dh;
  }
  ATTN_HOST_DEVICE index_t o_off(index_t b, index_t h, index_t i) const {
    return ((b * H + h) * Tq + i) * Dv;
  }
  // Row of key j of key/value head (b, hk) in k and v viewed as [B·Hk·Lk] rows.
  ATTN_HOST_DEVICE index_t k_row(index_t b, index_t hk, index_t j) const {
    return (b * Hk + hk) * key_rows() + j;
  }
  ATTN_HOST_DEVICE index_t k_off(index_t b, index_t hk, index_t j) const {
    return k_row(b, hk, j) * Dh;
  }
  ATTN_HOST_DEVICE index_t v_off(index_t b, index_t hk, index_t j) const {
    return k_row(b, hk, j) * Dv;
  }
  ATTN_HOST_DEVICE index_t row(index_t b, index_t h, index_t i) const {
    return (b * H + h) * Tq + i;
  }
  // The absolute position of query i: queries are aligned at the end of the keys (as
  // mask::Causal), so self-attention has position i and a decoding step after L cached keys
  // L + i. Key j is at position j. Positional scores (ALiBi, rotary) use these.
  ATTN_HOST_DEVICE index_t query_position(index_t i) const { return i + Tk - Tq; }
};

// The geometry of q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv], checked: `op` names the
// caller in the shape_error. With key_length > 0 the call attends to the first key_length of the
// k.shape()[2] rows of each key/value head (a cache with spare capacity).
inline AttentionGeometry attention_geometry(const Shape& q, const Shape& k, const Shape& v,
                                            const char* op, index_t key_length = 0) {
  ATTN_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, shape_error, op,
             ": q, k, v must be [B, H, T, D], got ", q, ", ", k, ", ", v);
  AttentionGeometry g{q[0], q[1], k[1], q[2], k[2], q[3], v[3], k[2]};
  ATTN_CHECK(k[0] == g.B && v[0] == g.B, shape_error, op, ": batch sizes differ: ", q, ", ", k,
             ", ", v);
  ATTN_CHECK(v[1] == g.Hk && v[2] == g.Lk, shape_error, op, ": k ", k, " and v ", v,
             " differ in heads or length");
  ATTN_CHECK(k[3] == g.Dh, shape_error, op, ": q ", q, " and k ", k, " differ in head width");
  ATTN_CHECK(g.Hk > 0 && g.H % g.Hk == 0, shape_error, op, ": ", g.Hk,
             " key/value heads do not divide ", g.H, " query heads");
  ATTN_CHECK(key_length >= 0 && key_length <= g.Lk, shape_error, op, ": key_length ", key_length,
             " outside [0, ", g.Lk, "] for k ", k);
  if (key_length > 0) g.Tk = key_length;
  return g;
}

}  // namespace attn::detail
