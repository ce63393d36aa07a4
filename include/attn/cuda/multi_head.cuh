// attn/cuda/multi_head.cuh: cuda::MultiHeadAttention, the GPU twin of attn::MultiHeadAttention
// (separate projections, softmax kernel, any DeviceMaskPolicy mask, grouped-query heads):
// forward and backward of self-attention on the device, projections with cuBLAS (FP32, no TF32)
// and the fused kernels of flash_attention.cuh in between. It is built from a host module, whose
// weights it copies; gradients go back into the host module's Parameters, so the host optimizers
// train it (upload() after each step).
// With config.sinks the sink logits (the host module's `sinks`) are uploaded and trained like the
// weights. Does not do cross-attention, a key/value cache, tied projections, dropout or learned
// position biases (config.position_bias: refused), and keeps one forward's activations at a time
// (backward() follows the forward it differentiates).
//
//   y = (attention(x W_qᵀ + b_q, x W_kᵀ + b_k, x W_vᵀ + b_v) merged over heads) W_oᵀ + b_o
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "../attention/multi_head.hpp"
#include "blas.cuh"
#include "flash_attention.cuh"

namespace attn::cuda {

// Index maps between [B, T, n, Dh] (heads side by side in a row, as projections produce them)
// and [B, n, T, Dh] (one head per block, as the kernels read them): the source element of
// destination element e. ATTN_HOST_DEVICE, so the tests check them on the CPU.
struct HeadLayout {
  index_t B, T, n, Dh;
  // dst [B, n, T, Dh] <- src [B, T, n, Dh]
  ATTN_HOST_DEVICE index_t split_source(index_t e) const {
    const index_t d = e % Dh, t = (e / Dh) % T, h = (e / (Dh * T)) % n, b = e / (Dh * T * n);
    return ((b * T + t) * n + h) * Dh + d;
  }
  // dst [B, T, n, Dh] <- src [B, n, T, Dh]
  ATTN_HOST_DEVICE index_t merge_source(index_t e) const {
    const index_t d = e % Dh, h = (e / Dh) % n, t = (e / (Dh * n)) % T, b = e / (Dh * n * T);
    return ((b * n + h) * T + t) * Dh + d;
  }
  ATTN_HOST_DEVICE index_t size() const { return B * T * n * Dh; }
};

namespace kernels {

// Grid-stride loops over n elements.
template <bool Split>
__global__ void permute_heads(HeadLayout layout, const float* src, float* dst) {
  const index_t n = layout.size();
  for (index_t e = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<index_t>(gridDim.x) * blockDim.x)
    dst[e] = src[Split ? layout.split_source(e) : layout.merge_source(e)];
}

// y[r, c] += b[c] for a row-major [rows, cols] matrix. (Templates, so that a header may define
// them in every translation unit.)
template <class T>
__global__ void add_bias(T* y, const T* b, index_t rows, index_t cols) {
  for (index_t e = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; e < rows * cols;
       e += static_cast<index_t>(gridDim.x) * blockDim.x)
    y[e] += b[e % cols];
}

template <class T>
__global__ void fill(T* x, index_t n, T value) {
  for (index_t e = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<index_t>(gridDim.x) * blockDim.x)
    x[e] = value;
}

}  // namespace kernels

namespace detail {
inline constexpr int elementwise_threads = 256;
inline unsigned elementwise_blocks(index_t n) {
  return static_cast<unsigned>(
      std::clamp<index_t>((n + elementwise_threads - 1) / elementwise_threads, 1, 4096));
}
}  // namespace detail

template <ScorePolicy Score = score::ScaledDot, DeviceMaskPolicy Mask = mask::None,
          HeadsPolicy H = Heads<dynamic>>
class MultiHeadAttention {
 public:
  using host_type =
      attn::MultiHeadAttention<Score, kernel::Softmax, Mask, H, projection::Separate, float>;

  explicit MultiHeadAttention(const host_type& host)
      : d_model_(host.d_model()),
        heads_(host.heads()),
        kv_heads_(host.kv_heads()),
        head_dim_(host.head_dim()),
        bias_(host.config().bias),
        sinks_on_(host.config().sinks),
        score_(host.score) {
    ATTN_CHECK(host.config().dropout == 0, value_error,
               "cuda::MultiHeadAttention: dropout on the attention weights (config.dropout = ",
               host.config().dropout, ") is not implemented on the GPU");
    ATTN_CHECK(host.config().position_bias == LearnedPositionBias::none, value_error,
               "cuda::MultiHeadAttention: learned position biases (config.position_bias) run on "
               "the CPU paths only");
    if (sinks_on_) {
      sinks_ = DeviceTensor<float>(Shape{heads_});
      gsinks_ = DeviceTensor<float>(Shape{heads_});
    }
    for (Projection* p : {&q_, &k_, &v_, &o_}) {
      const index_t out = p == &k_ || p == &v_ ? kv_heads_ * head_dim_ : d_model_;
      p->w = DeviceTensor<float>(Shape{out, d_model_});
      p->gw = DeviceTensor<float>(Shape{out, d_model_});
      p->b = DeviceTensor<float>(Shape{bias_ ? out : 0});
      p->gb = DeviceTensor<float>(Shape{bias_ ? out : 0});
    }
    upload(host);
    zero_grad();
  }

  index_t d_model() const { return d_model_; }

  // Copies the host module's weights to the device (after a host optimizer step, say).
  void upload(const host_type& host) {
    auto put = [&](Projection& p, const ProjectionWeights<float>& w, const char* name) {
      ATTN_CHECK(w.weight.value.shape() == p.w.shape(), shape_error,
                 "cuda::MultiHeadAttention::upload: ", name, ".weight is ", w.weight.value.shape(),
                 ", expected ", p.w.shape());
      p.w.buffer().copy_from_host(w.weight.value.data(), static_cast<std::size_t>(p.w.numel()));
      if (bias_)
        p.b.buffer().copy_from_host(w.bias.value.data(), static_cast<std::size_t>(p.b.numel()));
    };
    put(q_, host.q_proj, "q_proj");
    put(k_, host.k_proj, "k_proj");
    put(v_, host.v_proj, "v_proj");
    put(o_, host.out_proj, "out_proj");
    if (sinks_on_) {
      ATTN_CHECK(host.sinks.value.shape() == sinks_.shape(), shape_error,
                 "cuda::MultiHeadAttention::upload: sinks is ", host.sinks.value.shape(),
                 ", expected ", sinks_.shape());
      sinks_.buffer().copy_from_host(host.sinks.value.data(),
                                     static_cast<std::size_t>(sinks_.numel()));
    }
  }

  void zero_grad() {
    for (Projection* p : {&q_, &k_, &v_, &o_}) {
      p->gw.buffer().zero();
      p->gb.buffer().zero();
    }
    if (sinks_on_) gsinks_.buffer().zero();
  }

  // Adds the gradients accumulated on the device into the host module's Parameter grads.
  void add_gradients_to(host_type& host) const {
    auto accumulate = [](const DeviceTensor<float>& g, Parameter<float>& param) {
      const Tensor<float> h = to_host(g);
      for (index_t i = 0; i < h.numel(); ++i) param.grad[i] += h[i];
    };
    auto add = [&](const Projection& p, ProjectionWeights<float>& w) {
      accumulate(p.gw, w.weight);
      if (bias_) accumulate(p.gb, w.bias);
    };
    add(q_, host.q_proj);
    add(k_, host.k_proj);
    add(v_, host.v_proj);
    add(o_, host.out_proj);
    if (sinks_on_) accumulate(gsinks_, host.sinks);
  }

  // Self-attention: x [B, T, D] -> y [B, T, D]. Keeps what backward() needs.
  DeviceTensor<float> forward(const DeviceTensor<float>& x, const Mask& mask = {}) {
    ATTN_CHECK(x.shape().rank() == 3 && x.shape()[2] == d_model_, shape_error,
               "cuda::MultiHeadAttention: x must be [B, T, ", d_model_, "], got ", x.shape());
    const index_t B = x.shape()[0], T = x.shape()[1];
    mask.validate(B, T, T);
    mask_ = mask;
    x_.resize(x.shape());
    if (x.numel() > 0)
      ATTN_CUDA_CHECK(cudaMemcpy(x_.data(), x.data(),
                                 static_cast<std::size_t>(x.numel()) * sizeof(float),
                                 cudaMemcpyDeviceToDevice));
    project(q_, x_, heads_, q_rows_, q_heads_);
    project(k_, x_, kv_heads_, k_rows_, k_heads_);
    project(v_, x_, kv_heads_, v_rows_, v_heads_);
    flash_attention(q_heads_, k_heads_, v_heads_, attention_, score_, mask_, nullptr, sinks());
    merged_.resize(Shape{B, T, d_model_});
    permute(attention_.out, merged_, HeadLayout{B, T, heads_, head_dim_}, false);
    DeviceTensor<float> y(Shape{B, T, d_model_});
    linear(o_, merged_, y);
    return y;
  }

  // dy = ∂L/∂y for the last forward -> dx = ∂L/∂x; adds ∂L/∂W into the device gradients.
  DeviceTensor<float> backward(const DeviceTensor<float>& dy) {
    ATTN_CHECK(dy.shape() == x_.shape() && x_.numel() > 0, shape_error,
               "cuda::MultiHeadAttention::backward: dy ", dy.shape(),
               " does not match the last forward's input ", x_.shape());
    const index_t B = x_.shape()[0], T = x_.shape()[1];
    // y = merged W_oᵀ + b_o
    DeviceTensor<float> d_merged(Shape{B, T, d_model_});
    linear_backward(o_, merged_, dy, d_merged, 0.0f);
    d_heads_.resize(attention_.out.shape());
    permute(d_merged, d_heads_, HeadLayout{B, T, heads_, head_dim_}, true);
    flash_attention_backward(q_heads_, k_heads_, v_heads_, attention_, d_heads_, grads_, score_,
                             mask_, nullptr, sinks());
    if (sinks_on_) {  // gsinks += this backward's dsinks
      kernels::add_bias<<<1, detail::elementwise_threads>>>(gsinks_.data(), grads_.dsinks.data(),
                                                            index_t(1), heads_);
      ATTN_CUDA_CHECK(cudaGetLastError());
    }
    DeviceTensor<float> dx(x_.shape());
    // x feeds three projections: dx = dq_rows W_q + dk_rows W_k + dv_rows W_v.
    float beta = 0.0f;
    for (auto [p, g, n] :
         {std::tuple{&q_, &grads_.dq, heads_}, std::tuple{&k_, &grads_.dk, kv_heads_},
          std::tuple{&v_, &grads_.dv, kv_heads_}}) {
      d_rows_.resize(Shape{B, T, n * head_dim_});
      permute(*g, d_rows_, HeadLayout{B, T, n, head_dim_}, false);
      linear_backward(*p, x_, d_rows_, dx, beta);
      beta = 1.0f;
    }
    return dx;
  }

 private:
  struct Projection {
    DeviceTensor<float> w, b, gw, gb;  // W [out, in] (PyTorch's layout), b [out]; and gradients
  };

  const DeviceTensor<float>* sinks() const { return sinks_on_ ? &sinks_ : nullptr; }

  // y [rows, out] = x [rows, in] Wᵀ + b
  void linear(const Projection& p, const DeviceTensor<float>& x, DeviceTensor<float>& y) {
    const int rows = static_cast<int>(x.numel() / d_model_), out = static_cast<int>(p.w.shape()[0]);
    gemm_row_major(blas_.get(), false, true, rows, out, static_cast<int>(d_model_), 1.0f, x.data(),
                   p.w.data(), 0.0f, y.data());
    if (bias_ && rows > 0) {
      kernels::add_bias<<<detail::elementwise_blocks(index_t(rows) * out),
                          detail::elementwise_threads>>>(y.data(), p.b.data(), rows, out);
      ATTN_CUDA_CHECK(cudaGetLastError());
    }
  }

  // For y = x Wᵀ + b: gW += dyᵀ x, gb += colsum(dy), dx = dy W + beta dx.
  void linear_backward(Projection& p, const DeviceTensor<float>& x, const DeviceTensor<float>& dy,
                       DeviceTensor<float>& dx, float beta) {
    const int rows = static_cast<int>(x.numel() / d_model_), out = static_cast<int>(p.w.shape()[0]),
              in = static_cast<int>(d_model_);
    if (rows == 0) return;
    gemm_row_major(blas_.get(), true, false, out, in, rows, 1.0f, dy.data(), x.data(), 1.0f,
                   p.gw.data());
    if (bias_) {
      if (ones_.numel() < rows) {
        ones_ = DeviceTensor<float>(Shape{rows});
        kernels::fill<<<detail::elementwise_blocks(rows), detail::elementwise_threads>>>(
            ones_.data(), rows, 1.0f);
        ATTN_CUDA_CHECK(cudaGetLastError());
      }
      // colsum(dy) = dyᵀ 1: dy read column-major is dyᵀ [out, rows], so no transpose.
      const float one = 1.0f;
      ATTN_CUBLAS_CHECK(cublasSgemv(blas_.get(), CUBLAS_OP_N, out, rows, &one, dy.data(), out,
                                    ones_.data(), 1, &one, p.gb.data(), 1));
    }
    gemm_row_major(blas_.get(), false, false, rows, in, out, 1.0f, dy.data(), p.w.data(), beta,
                   dx.data());
  }

  // rows [B, T, n·Dh] = x Wᵀ + b, then heads [B, n, T, Dh].
  void project(const Projection& p, const DeviceTensor<float>& x, index_t n,
               DeviceTensor<float>& rows, DeviceTensor<float>& heads) {
    const index_t B = x.shape()[0], T = x.shape()[1];
    rows.resize(Shape{B, T, n * head_dim_});
    heads.resize(Shape{B, n, T, head_dim_});
    linear(p, x, rows);
    permute(rows, heads, HeadLayout{B, T, n, head_dim_}, true);
  }

  static void permute(const DeviceTensor<float>& src, DeviceTensor<float>& dst,
                      const HeadLayout& layout, bool split) {
    if (layout.size() == 0) return;
    const unsigned blocks = detail::elementwise_blocks(layout.size());
    if (split)
      kernels::permute_heads<true>
          <<<blocks, detail::elementwise_threads>>>(layout, src.data(), dst.data());
    else
      kernels::permute_heads<false>
          <<<blocks, detail::elementwise_threads>>>(layout, src.data(), dst.data());
    ATTN_CUDA_CHECK(cudaGetLastError());
  }

  index_t d_model_, heads_, kv_heads_, head_dim_;
  bool bias_, sinks_on_;
  Score score_;
  Mask mask_{};
  CublasHandle blas_;
  Projection q_, k_, v_, o_;
  DeviceTensor<float> sinks_, gsinks_;  // [H] with config.sinks: the logits and their gradient
  // The last forward's activations, and backward's scratch.
  DeviceTensor<float> x_, q_rows_, k_rows_, v_rows_, q_heads_, k_heads_, v_heads_, merged_;
  DeviceAttention<float> attention_;
  DeviceTensor<float> d_heads_, d_rows_, ones_;
  DeviceAttentionGradients<float> grads_;
};

}  // namespace attn::cuda
