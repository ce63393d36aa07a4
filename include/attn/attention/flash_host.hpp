// attn/attention/flash_host.hpp: runs the CUDA kernels' block programs (flash_block.hpp) on the
// CPU, block after block, with one thread or with several std::threads meeting at a barrier at
// each __syncthreads, so the exact GPU algorithm is tested against the reference without a GPU.
// Does not aim for speed (online_softmax.hpp is the CPU fast path) and does not record on a tape.
//
// Shared memory starts as NaN in every block: a program that read a float it had not written
// would spread NaN into its outputs, and the tests would see it.
#pragma once

#include <barrier>
#include <limits>
#include <thread>
#include <vector>

#include "../core/tensor.hpp"
#include "flash_block.hpp"
#include "kernel_common.hpp"

namespace attn {

namespace flash {

// Thread `id` of `count` host threads standing in for a block's threads: sync() is
// __syncthreads, a std::barrier. With count = 1 every strided loop of a block program runs all of
// its items in order on the calling thread. (ATTN_HOST_DEVICE only so that nvcc accepts the block
// programs instantiated with it; it never runs on a GPU.)
struct HostBlock {
  int id = 0, count = 1;
  std::barrier<>* barrier = nullptr;
  ATTN_HOST_DEVICE int thread() const { return id; }
  ATTN_HOST_DEVICE int size() const { return count; }
  ATTN_HOST_DEVICE void sync() const {
#if !defined(__CUDA_ARCH__)  // the device pass of nvcc compiles this too, but it never runs there
    barrier->arrive_and_wait();
#endif
  }
};

// Runs program(block, smem, index) for every block index in [0, blocks), one block at a time,
// each with `threads` threads and `smem_size` elements of NaN-filled shared memory of type Acc.
template <class Acc, class Program>
void run_grid_on_host(index_t blocks, int smem_size, int threads, Program&& program) {
  ATTN_CHECK(threads >= 1, value_error, "flash::run_grid_on_host: threads = ", threads,
             " must be >= 1");
  std::vector<Acc> smem(static_cast<std::size_t>(smem_size));
  for (index_t block = 0; block < blocks; ++block) {
    std::fill(smem.begin(), smem.end(), std::numeric_limits<Acc>::quiet_NaN());
    std::barrier<> barrier(threads);
    if (threads == 1) {
      program(HostBlock{0, 1, &barrier}, smem.data(), block);
      continue;
    }
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { program(HostBlock{t, threads, &barrier}, smem.data(), block); });
  }  // the jthreads join at the end of each block
}

// The geometry of q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv], checked as every
// attention entry point checks it, and with Dh, Dv >= 1.
inline Geometry checked_geometry(const Shape& q, const Shape& k, const Shape& v, const char* op) {
  const detail::AttentionGeometry a = detail::attention_geometry(q, k, v, op);
  ATTN_CHECK(a.Dh >= 1 && a.Dv >= 1, shape_error, op, ": head widths must be >= 1, got q ", q,
             ", v ", v);
  return Geometry{a};
}

}  // namespace flash

// The element types the emulation takes: the GPU's (float, bf16), and double, computed in double
// throughout (for finite-difference tests of the block programs themselves).
template <class T>
concept EmulatedElement = FlashElement<T> || std::same_as<T, double>;

// Element-wise conversion between tensors of the accumulator type and the kernels' element types
// (bf16 rounds to nearest even; others are copied).
template <EmulatedElement T, class A>
std::vector<T> convert_elements(const Tensor<A>& t) {
  std::vector<T> out(static_cast<std::size_t>(t.numel()));
  for (index_t i = 0; i < t.numel(); ++i) out[static_cast<std::size_t>(i)] = element_cast<T>(t[i]);
  return out;
}
template <class A, EmulatedElement T>
Tensor<A> convert_elements(const std::vector<T>& x, const Shape& shape) {
  ATTN_CHECK(static_cast<index_t>(x.size()) == shape.numel(), shape_error,
             "convert_elements: ", x.size(), " elements for shape ", shape);
  Tensor<A> out(shape);
  for (index_t i = 0; i < shape.numel(); ++i)
    out[i] = element_cast<A>(x[static_cast<std::size_t>(i)]);
  return out;
}

template <class A>
struct FlashForwardResult {
  Tensor<A> out;  // [B, H, Tq, Dv], the values the kernel stored as T, widened
  Tensor<A> lse;  // [B, H, Tq], without the beta_q ‖q‖² term (see flash_block.hpp)
};

template <class A>
struct FlashGradients {
  Tensor<A> dq, dk, dv;  // shaped as q, k, v
  Tensor<A> dsinks;      // [H] with sinks (summed over batches and rows in that order), else empty
};

namespace flash {

// The sink logits as the block programs read them (null for none), checked against the heads;
// `sinks` is a host Tensor or a cuda::DeviceTensor.
template <class Sinks>
auto checked_sinks(const Sinks* sinks, const Geometry& g, const char* op)
    -> decltype(sinks->data()) {
  if (sinks == nullptr) return nullptr;
  ATTN_CHECK(sinks->shape() == (Shape{g.H}), shape_error, op, ": sinks must be [", g.H,
             "] (one logit per head), got ", sinks->shape());
  return sinks->data();
}

}  // namespace flash

// The fused forward as the GPU runs it, for inputs stored as T (rounded from A =
// flash_accumulator<T>), on the CPU with `threads` threads per block; with `sinks` ([H]), the
// softmax of every row of head h has the sink logit sinks[h] (attention_sink's result).
template <EmulatedElement T, ScorePolicy Score = score::ScaledDot,
          DeviceMaskPolicy Mask = mask::None, class A = flash_accumulator<T>>
FlashForwardResult<A> emulate_flash_forward(const Tensor<A>& q, const Tensor<A>& k,
                                            const Tensor<A>& v, const Score& score = {},
                                            const Mask& mask = {}, int threads = 1,
                                            const Tensor<A>* sinks = nullptr) {
  const flash::Geometry g =
      flash::checked_geometry(q.shape(), k.shape(), v.shape(), "flash_forward");
  mask.validate(g.B, g.Tq, g.Tk);
  const A* sink_logits = flash::checked_sinks(sinks, g, "flash_forward");
  const std::vector<T> qs = convert_elements<T>(q), ks = convert_elements<T>(k),
                       vs = convert_elements<T>(v);
  std::vector<T> o(static_cast<std::size_t>(g.B * g.H * g.Tq * g.Dv));
  FlashForwardResult<A> r{Tensor<A>(), Tensor<A>(Shape{g.B, g.H, g.Tq})};
  const flash::ForwardArgs<T, Mask> args{
      qs.data(),
      ks.data(),
      vs.data(),
      o.data(),
      r.lse.data(),
      g,
      static_cast<A>(score.alpha(g.Dh)),
      mask,
      static_cast<A>(detail::soft_cap_of(score, "flash_forward")),
      sink_logits};
  flash::run_grid_on_host<A>(g.forward_blocks(), flash::forward_smem_size(g), threads,
                             [&](const flash::HostBlock& blk, A* smem, index_t block) {
                               flash::forward_block<Score>(blk, smem, args, block);
                             });
  r.out = convert_elements<A>(o, Shape{g.B, g.H, g.Tq, g.Dv});
  return r;
}

// The fused backward as the GPU runs it: the dQ program over all query tiles, then the dK/dV
// program over all key tiles. `forward` is what emulate_flash_forward returned (with the same
// `sinks`); dout is ∂L/∂out. With sinks, dsinks[h] sums the dQ program's row terms of head h over
// the batches and rows in order, as the CUDA backward does.
template <EmulatedElement T, ScorePolicy Score = score::ScaledDot,
          DeviceMaskPolicy Mask = mask::None, class A = flash_accumulator<T>>
FlashGradients<A> emulate_flash_backward(const Tensor<A>& q, const Tensor<A>& k, const Tensor<A>& v,
                                         const FlashForwardResult<A>& forward,
                                         const Tensor<A>& dout, const Score& score = {},
                                         const Mask& mask = {}, int threads = 1,
                                         const Tensor<A>* sinks = nullptr) {
  const flash::Geometry g =
      flash::checked_geometry(q.shape(), k.shape(), v.shape(), "flash_backward");
  mask.validate(g.B, g.Tq, g.Tk);
  const A* sink_logits = flash::checked_sinks(sinks, g, "flash_backward");
  const Shape o_shape{g.B, g.H, g.Tq, g.Dv};
  ATTN_CHECK(forward.out.shape() == o_shape && dout.shape() == o_shape &&
                 forward.lse.shape() == (Shape{g.B, g.H, g.Tq}),
             shape_error, "flash_backward: out ", forward.out.shape(), ", dout ", dout.shape(),
             " and lse ", forward.lse.shape(), " do not fit q ", q.shape(), " and v ", v.shape());
  const std::vector<T> qs = convert_elements<T>(q), ks = convert_elements<T>(k),
                       vs = convert_elements<T>(v), os = convert_elements<T>(forward.out),
                       dos = convert_elements<T>(dout);
  std::vector<T> dq(qs.size()), dk(ks.size()), dv(vs.size());
  std::vector<A> delta(static_cast<std::size_t>(g.B * g.H * g.Tq));
  std::vector<A> sink_terms(sink_logits ? delta.size() : 0);
  const flash::BackwardArgs<T, Mask> args{
      qs.data(),
      ks.data(),
      vs.data(),
      os.data(),
      dos.data(),
      forward.lse.data(),
      delta.data(),
      dq.data(),
      dk.data(),
      dv.data(),
      g,
      static_cast<A>(score.alpha(g.Dh)),
      mask,
      static_cast<A>(detail::soft_cap_of(score, "flash_backward")),
      sink_logits,
      sink_logits ? sink_terms.data() : nullptr};
  const int smem = flash::backward_smem_size(g);
  flash::run_grid_on_host<A>(g.forward_blocks(), smem, threads,
                             [&](const flash::HostBlock& blk, A* s, index_t block) {
                               flash::backward_dq_block<Score>(blk, s, args, block);
                             });
  flash::run_grid_on_host<A>(g.key_blocks(), smem, threads,
                             [&](const flash::HostBlock& blk, A* s, index_t block) {
                               flash::backward_dkv_block<Score>(blk, s, args, block);
                             });
  FlashGradients<A> r{convert_elements<A>(dq, q.shape()), convert_elements<A>(dk, k.shape()),
                      convert_elements<A>(dv, v.shape()), Tensor<A>()};
  if (sink_logits) {
    r.dsinks = Tensor<A>(Shape{g.H});
    for (index_t h = 0; h < g.H; ++h) {
      A sum = 0;
      for (index_t b = 0; b < g.B; ++b)
        for (index_t i = 0; i < g.Tq; ++i)
          sum += sink_terms[static_cast<std::size_t>(g.row(b, h, i))];
      r.dsinks[h] = sum;
    }
  }
  return r;
}

}  // namespace attn
