// attn/cuda/flash_attention.cuh: fused softmax attention on a GPU, forward and backward,
// FlashAttention-style: one thread block per (batch, head, query tile), tiles of Q, K, V in
// shared memory, an online softmax, the T×T matrix never stored, masked-out tiles skipped.
// The kernels are thin: each runs a block program of attn/attention/flash_block.hpp, the same
// code the host emulation (flash_host.hpp) runs and the tests check on the CPU.
// Does not do dropout, other kernels than softmax, masks that are not DeviceMaskPolicy, or
// tensor-core (mma) arithmetic: the tile products are float FMAs on CUDA cores.
//
// Shapes: q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv] -> out [B, H, Tq, Dv] and
// lse [B, H, Tq] (float); Hk divides H (grouped-query). Elements float or attn::bf16 (bf16 is
// loaded, widened to float, computed in float and rounded once when stored). Optional sinks
// [H] (float): head h's logit joins every row's softmax and brings no value (attention_sink);
// the backward then gives their gradient too, summed per head in a fixed order.
#pragma once

#include <cuda_runtime.h>

#include <climits>

#include "../attention/flash_block.hpp"
#include "../attention/flash_host.hpp"
#include "device_buffer.hpp"
#include "error.hpp"

namespace attn::cuda {

// A CUDA thread block as the block programs see it.
struct DeviceBlock {
  __device__ int thread() const { return static_cast<int>(threadIdx.x); }
  __device__ int size() const { return static_cast<int>(blockDim.x); }
  __device__ void sync() const { __syncthreads(); }
};

namespace kernels {

template <ScorePolicy Score, class T, class Mask>
__global__ void __launch_bounds__(flash::block_threads)
    flash_forward(const flash::ForwardArgs<T, Mask> args) {
  extern __shared__ float attn_flash_smem[];
  flash::forward_block<Score>(DeviceBlock{}, attn_flash_smem, args,
                              static_cast<index_t>(blockIdx.x));
}

template <ScorePolicy Score, class T, class Mask>
__global__ void __launch_bounds__(flash::block_threads)
    flash_backward_dq(const flash::BackwardArgs<T, Mask> args) {
  extern __shared__ float attn_flash_smem[];
  flash::backward_dq_block<Score>(DeviceBlock{}, attn_flash_smem, args,
                                  static_cast<index_t>(blockIdx.x));
}

template <ScorePolicy Score, class T, class Mask>
__global__ void __launch_bounds__(flash::block_threads)
    flash_backward_dkv(const flash::BackwardArgs<T, Mask> args) {
  extern __shared__ float attn_flash_smem[];
  flash::backward_dkv_block<Score>(DeviceBlock{}, attn_flash_smem, args,
                                   static_cast<index_t>(blockIdx.x));
}

// dsinks[h] = Σ_{b,i} terms[b, h, i]: one block per head, each thread summing a fixed stride of
// the rows in order, then a tree over the threads (blockDim.x a power of two): the same bits on
// every run.
template <class Unused = void>
__global__ void __launch_bounds__(flash::block_threads)
    sum_sink_terms(const float* terms, index_t B, index_t H, index_t Tq, float* dsinks) {
  __shared__ float part[flash::block_threads];
  const index_t h = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x);
  float sum = 0;
  for (index_t r = t; r < B * Tq; r += blockDim.x) sum += terms[((r / Tq) * H + h) * Tq + r % Tq];
  part[t] = sum;
  __syncthreads();
  for (int w = static_cast<int>(blockDim.x) / 2; w > 0; w /= 2) {
    if (t < w) part[t] += part[t + w];
    __syncthreads();
  }
  if (t == 0) dsinks[h] = part[0];
}

}  // namespace kernels

namespace detail {

// Launches `kernel` on `blocks` blocks of flash::block_threads threads with `floats` floats of
// dynamic shared memory, after checking that the current device allows that much per block
// (above 48 KiB a kernel must opt in, which this does).
template <class Args>
void launch_flash(void (*kernel)(Args), index_t blocks, int floats, const Args& args,
                  cudaStream_t stream, const char* op) {
  if (blocks == 0) return;  // an empty grid is an error to CUDA, and there is nothing to do
  const std::size_t bytes = static_cast<std::size_t>(floats) * sizeof(float);
  int device = 0, limit = 0;
  ATTN_CUDA_CHECK(cudaGetDevice(&device));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  ATTN_CHECK(bytes <= static_cast<std::size_t>(limit), value_error, op,
             ": head widths Dh = ", args.g.Dh, " and Dv = ", args.g.Dv, " need ", bytes,
             " bytes of shared memory per block; this GPU allows ", limit);
  ATTN_CHECK(blocks <= INT_MAX, value_error, op, ": ", blocks,
             " blocks exceed the grid limit of 2^31 - 1");
  ATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), flash::block_threads, bytes, stream>>>(args);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail

// Launches the forward on device pointers the caller owns (e.g. a __nv_bfloat16 buffer
// reinterpret_cast to attn::bf16: the layouts are the same). No shape checks beyond the grid's.
template <ScorePolicy Score, FlashElement T, DeviceMaskPolicy Mask>
void launch_flash_forward(const flash::ForwardArgs<T, Mask>& args, cudaStream_t stream = nullptr) {
  detail::launch_flash(kernels::flash_forward<Score, T, Mask>, args.g.forward_blocks(),
                       flash::forward_smem_size(args.g), args, stream, "cuda::flash_attention");
}

// Launches the backward: the dQ kernel (which also writes args.delta, and args.sink_terms with
// sinks), then the dK/dV kernel, in that order on `stream`; with sinks, then the per-head sum of
// the sink terms into `dsinks` [H].
template <ScorePolicy Score, FlashElement T, DeviceMaskPolicy Mask>
void launch_flash_backward(const flash::BackwardArgs<T, Mask>& args, cudaStream_t stream = nullptr,
                           float* dsinks = nullptr) {
  const int smem = flash::backward_smem_size(args.g);
  detail::launch_flash(kernels::flash_backward_dq<Score, T, Mask>, args.g.forward_blocks(), smem,
                       args, stream, "cuda::flash_attention_backward");
  detail::launch_flash(kernels::flash_backward_dkv<Score, T, Mask>, args.g.key_blocks(), smem, args,
                       stream, "cuda::flash_attention_backward");
  if (args.sinks != nullptr && args.g.H > 0) {
    ATTN_CHECK(dsinks != nullptr && args.sink_terms != nullptr, value_error,
               "cuda::flash_attention_backward: sinks need sink_terms and dsinks");
    kernels::sum_sink_terms<<<static_cast<unsigned>(args.g.H), flash::block_threads, 0, stream>>>(
        args.sink_terms, args.g.B, args.g.H, args.g.Tq, dsinks);
    ATTN_CUDA_CHECK(cudaGetLastError());
  }
}

template <class T>
struct DeviceAttention {
  DeviceTensor<T> out;      // [B, H, Tq, Dv]
  DeviceTensor<float> lse;  // [B, H, Tq], without the beta_q ‖q‖² term; −∞ for empty rows
};

template <class T>
struct DeviceAttentionGradients {
  DeviceTensor<T> dq, dk, dv;      // shaped as q, k, v; overwritten by each backward
  DeviceTensor<float> delta;       // [B, H, Tq] scratch: D_i = Σ_d dO_id O_id
  DeviceTensor<float> sink_terms;  // [B, H, Tq] scratch with sinks: each row's share of dsinks
  DeviceTensor<float> dsinks;      // [H] with sinks, overwritten by each backward; else empty
};

// out = softmax attention of q, k, v into `result` (resized when needed, else reused); with
// `sinks` ([H]), the softmax of every row of head h has the sink logit sinks[h].
template <ScorePolicy Score = score::ScaledDot, DeviceMaskPolicy Mask = mask::None, FlashElement T>
void flash_attention(const DeviceTensor<T>& q, const DeviceTensor<T>& k, const DeviceTensor<T>& v,
                     DeviceAttention<T>& result, const Score& score = {}, const Mask& mask = {},
                     cudaStream_t stream = nullptr, const DeviceTensor<float>* sinks = nullptr) {
  const flash::Geometry g =
      flash::checked_geometry(q.shape(), k.shape(), v.shape(), "cuda::flash_attention");
  mask.validate(g.B, g.Tq, g.Tk);
  const float* sink_logits = flash::checked_sinks(sinks, g, "cuda::flash_attention");
  result.out.resize(Shape{g.B, g.H, g.Tq, g.Dv});
  result.lse.resize(Shape{g.B, g.H, g.Tq});
  const flash::ForwardArgs<T, Mask> args{
      q.data(),
      k.data(),
      v.data(),
      result.out.data(),
      result.lse.data(),
      g,
      static_cast<float>(score.alpha(g.Dh)),
      mask,
      static_cast<float>(attn::detail::soft_cap_of(score, "cuda::flash_attention")),
      sink_logits};
  launch_flash_forward<Score>(args, stream);
}

template <ScorePolicy Score = score::ScaledDot, DeviceMaskPolicy Mask = mask::None, FlashElement T>
DeviceAttention<T> flash_attention(const DeviceTensor<T>& q, const DeviceTensor<T>& k,
                                   const DeviceTensor<T>& v, const Score& score = {},
                                   const Mask& mask = {}, cudaStream_t stream = nullptr,
                                   const DeviceTensor<float>* sinks = nullptr) {
  DeviceAttention<T> r;
  flash_attention(q, k, v, r, score, mask, stream, sinks);
  return r;
}

// Gradients of q, k, v (and of the sinks, when the forward had them: pass the same `sinks`)
// given dout = ∂L/∂out and the forward's result, into `grads`.
template <ScorePolicy Score = score::ScaledDot, DeviceMaskPolicy Mask = mask::None, FlashElement T>
void flash_attention_backward(const DeviceTensor<T>& q, const DeviceTensor<T>& k,
                              const DeviceTensor<T>& v, const DeviceAttention<T>& forward,
                              const DeviceTensor<T>& dout, DeviceAttentionGradients<T>& grads,
                              const Score& score = {}, const Mask& mask = {},
                              cudaStream_t stream = nullptr,
                              const DeviceTensor<float>* sinks = nullptr) {
  const char* op = "cuda::flash_attention_backward";
  const flash::Geometry g = flash::checked_geometry(q.shape(), k.shape(), v.shape(), op);
  mask.validate(g.B, g.Tq, g.Tk);
  const float* sink_logits = flash::checked_sinks(sinks, g, op);
  const Shape o_shape{g.B, g.H, g.Tq, g.Dv};
  ATTN_CHECK(forward.out.shape() == o_shape && dout.shape() == o_shape &&
                 forward.lse.shape() == (Shape{g.B, g.H, g.Tq}),
             shape_error, op, ": out ", forward.out.shape(), ", dout ", dout.shape(), " and lse ",
             forward.lse.shape(), " do not fit q ", q.shape(), " and v ", v.shape());
  grads.dq.resize(q.shape());
  grads.dk.resize(k.shape());
  grads.dv.resize(v.shape());
  grads.delta.resize(Shape{g.B, g.H, g.Tq});
  grads.sink_terms.resize(Shape{sink_logits ? g.B * g.H * g.Tq : 0});
  grads.dsinks.resize(Shape{sink_logits ? g.H : 0});
  const flash::BackwardArgs<T, Mask> args{q.data(),
                                          k.data(),
                                          v.data(),
                                          forward.out.data(),
                                          dout.data(),
                                          forward.lse.data(),
                                          grads.delta.data(),
                                          grads.dq.data(),
                                          grads.dk.data(),
                                          grads.dv.data(),
                                          g,
                                          static_cast<float>(score.alpha(g.Dh)),
                                          mask,
                                          static_cast<float>(attn::detail::soft_cap_of(score, op)),
                                          sink_logits,
                                          sink_logits ? grads.sink_terms.data() : nullptr};
  launch_flash_backward<Score>(args, stream, sink_logits ? grads.dsinks.data() : nullptr);
}

template <ScorePolicy Score = score::ScaledDot, DeviceMaskPolicy Mask = mask::None, FlashElement T>
DeviceAttentionGradients<T> flash_attention_backward(
    const DeviceTensor<T>& q, const DeviceTensor<T>& k, const DeviceTensor<T>& v,
    const DeviceAttention<T>& forward, const DeviceTensor<T>& dout, const Score& score = {},
    const Mask& mask = {}, cudaStream_t stream = nullptr,
    const DeviceTensor<float>* sinks = nullptr) {
  DeviceAttentionGradients<T> grads;
  flash_attention_backward(q, k, v, forward, dout, grads, score, mask, stream, sinks);
  return grads;
}

// The number of CUDA devices, 0 when there is none or no usable driver (never throws: this is
// how a program asks whether it can run on a GPU at all). `why` receives the runtime's reason.
inline int device_count(std::string* why = nullptr) {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    if (why)
      *why = attn::detail::message(cudaGetErrorName(status), ": ", cudaGetErrorString(status));
    static_cast<void>(cudaGetLastError());  // not sticky; clear it
    return 0;
  }
  if (why && n == 0) *why = "no CUDA device";
  return n;
}

}  // namespace attn::cuda
