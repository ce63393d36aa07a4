// benchmarks/cuda_attention.cu: attn's fused CUDA attention (cuda/flash_attention.cuh) against
// unfused attention built on cuBLAS (S = alpha Q Kᵀ by a batched GEMM into global memory, a row
// softmax kernel, O = P V by a second batched GEMM), forward, in TFLOP/s; and the fused
// backward's time. Checks that the two forwards agree before timing them.
//
//   bench_cuda_attention [--lengths 512,1024,2048,4096,8192] [--batch 2] [--heads 16]
//                        [--head-dim 64] [--reps 20]
//
// FLOPs are counted as 4·B·H·T²·Dh for a forward (two products) and half that when causal, for
// both implementations (the unfused one computes the masked half anyway); the backward as 2.5x
// the forward (FlashAttention's convention: five products against two). cuBLAS runs in FP32
// without TF32 for float, and with bf16 inputs and FP32 accumulation (tensor cores) for bf16;
// the fused kernels use CUDA cores only. Exits 77 with a message when there is no GPU.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <attn/cuda/blas.cuh>
#include <attn/cuda/flash_attention.cuh>
#include <attn/cuda/timing.cuh>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using attn::index_t;
using attn::Shape;
using attn::Tensor;
namespace cuda = attn::cuda;

using cuda::median_ms;

template <class T>
constexpr cudaDataType_t cuda_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// P = softmax(S) row by row, one block of 256 threads per row; causal: keys j > i get 0.
template <class T>
__global__ void softmax_rows(const float* s, T* p, index_t n, bool causal) {
  __shared__ float red[256];
  const index_t row = blockIdx.x, i = row % n;
  const float* x = s + row * n;
  T* y = p + row * n;
  const index_t end = causal ? i + 1 : n;
  float m = -HUGE_VALF;
  for (index_t j = threadIdx.x; j < end; j += blockDim.x) m = fmaxf(m, x[j]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float z = 0;
  for (index_t j = threadIdx.x; j < end; j += blockDim.x) z += expf(x[j] - m);
  red[threadIdx.x] = z;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  z = red[0];
  for (index_t j = threadIdx.x; j < n; j += blockDim.x)
    y[j] = attn::element_cast<T>(j < end ? expf(x[j] - m) / z : 0.0f);
}

// The unfused forward: scores in global memory [B·H, T, T] (float), weights [B·H, T, T] (T).
template <class T>
struct Unfused {
  cuda::CublasHandle blas;
  cuda::DeviceBuffer<float> s;
  cuda::DeviceBuffer<T> p;
  Unfused(index_t bh, index_t t)
      : s(static_cast<std::size_t>(bh * t * t)), p(static_cast<std::size_t>(bh * t * t)) {}

  void operator()(const cuda::DeviceTensor<T>& q, const cuda::DeviceTensor<T>& k,
                  const cuda::DeviceTensor<T>& v, cuda::DeviceTensor<T>& o, bool causal) {
    const int bh = static_cast<int>(q.shape()[0] * q.shape()[1]),
              n = static_cast<int>(q.shape()[2]), d = static_cast<int>(q.shape()[3]);
    const float alpha = 1.0f / std::sqrt(static_cast<float>(d)), one = 1.0f, zero = 0.0f;
    // S [n, n] = alpha Q Kᵀ and O [n, d] = P V, row-major, per batch entry (see
    // cuda::column_major_gemm).
    const cuda::ColumnMajorGemm qk = cuda::column_major_gemm(false, true, n, n, d);
    ATTN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas.get(), qk.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N,
        qk.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N, qk.m, qk.n, qk.k, &alpha, k.data(),
        cuda_type<T>(), qk.ld_first, static_cast<long long>(n) * d, q.data(), cuda_type<T>(),
        qk.ld_second, static_cast<long long>(n) * d, &zero, s.data(), CUDA_R_32F, qk.ldc,
        static_cast<long long>(n) * n, bh, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    softmax_rows<T><<<static_cast<unsigned>(bh * n), 256>>>(s.data(), p.data(), n, causal);
    ATTN_CUDA_CHECK(cudaGetLastError());
    const cuda::ColumnMajorGemm pv = cuda::column_major_gemm(false, false, n, d, n);
    ATTN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas.get(), pv.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N,
        pv.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N, pv.m, pv.n, pv.k, &one, v.data(),
        cuda_type<T>(), pv.ld_first, static_cast<long long>(n) * d, p.data(), cuda_type<T>(),
        pv.ld_second, static_cast<long long>(n) * n, &zero, o.data(), cuda_type<T>(), pv.ldc,
        static_cast<long long>(n) * d, bh, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
};

template <class T, class Mask>
void run(index_t B, index_t H, index_t n, index_t d, int reps, const char* dtype) {
  constexpr bool causal = std::is_same_v<Mask, attn::mask::Causal>;
  attn::Rng rng(1);
  const Shape shape{B, H, n, d};
  const auto q = cuda::to_device<T>(Tensor<float>::randn(shape, rng)),
             k = cuda::to_device<T>(Tensor<float>::randn(shape, rng)),
             v = cuda::to_device<T>(Tensor<float>::randn(shape, rng)),
             dout = cuda::to_device<T>(Tensor<float>::randn(shape, rng));
  const attn::score::ScaledDot score;
  const Mask mask{};
  cuda::DeviceAttention<T> fused;
  cuda::DeviceAttentionGradients<T> grads;
  const double fwd = median_ms(reps, [&] { cuda::flash_attention(q, k, v, fused, score, mask); });
  const double bwd = median_ms(
      reps, [&] { cuda::flash_attention_backward(q, k, v, fused, dout, grads, score, mask); });
  const double flops =
      4.0 * double(B * H) * double(n) * double(n) * double(d) * (causal ? 0.5 : 1.0);
  std::string unfused_cell = "out of memory";
  double err = NAN;
  try {
    Unfused<T> unfused(B * H, n);
    cuda::DeviceTensor<T> o(shape);
    const double ms = median_ms(reps, [&] { unfused(q, k, v, o, causal); });
    err = attn::max_abs_diff(cuda::to_host(o), cuda::to_host(fused.out));
    char cell[64];
    std::snprintf(cell, sizeof cell, "%9.3f ms %7.2f", ms, flops / (ms * 1e9));
    unfused_cell = cell;
  } catch (const attn::cuda_error&) {
    static_cast<void>(cudaGetLastError());
  }
  std::printf("%-5s %-6s %6lld | %9.3f ms %7.2f | %-20s | %9.3f ms %7.2f | %.1e\n", dtype,
              causal ? "causal" : "none", (long long)n, fwd, flops / (fwd * 1e9),
              unfused_cell.c_str(), bwd, 2.5 * flops / (bwd * 1e9), err);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cuda_attention: fused CUDA attention against cuBLAS-based unfused attention"};
  std::vector<index_t> lengths{512, 1024, 2048, 4096, 8192};
  index_t batch = 2, heads = 16, head_dim = 64;
  int reps = 20;
  app.add_option("--lengths", lengths, "sequence lengths")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--batch", batch, "batch size")->check(CLI::Range(1, 1024));
  app.add_option("--heads", heads, "heads")->check(CLI::Range(1, 256));
  app.add_option("--head-dim", head_dim, "head width")->check(CLI::Range(1, 512));
  app.add_option("--reps", reps, "timed repetitions (median)")->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("bench_cuda_attention: no usable CUDA device (%s); nothing measured.\n",
                why.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  ATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, B = %lld, H = %lld, Dh = %lld, median of %d; TFLOP/s as in the header\n",
              prop.name, (long long)batch, (long long)heads, (long long)head_dim, reps);
  std::printf(
      "dtype mask        T | fused forward         | unfused (cuBLAS) fwd | fused backward        "
      "| max |diff|\n");
  try {
    for (const index_t n : lengths)
      for (const bool causal : {false, true}) {
        if (causal) {
          run<float, attn::mask::Causal>(batch, heads, n, head_dim, reps, "float");
          run<attn::bf16, attn::mask::Causal>(batch, heads, n, head_dim, reps, "bf16");
        } else {
          run<float, attn::mask::None>(batch, heads, n, head_dim, reps, "float");
          run<attn::bf16, attn::mask::None>(batch, heads, n, head_dim, reps, "bf16");
        }
      }
  } catch (const attn::error& e) {
    std::fprintf(stderr, "bench_cuda_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
