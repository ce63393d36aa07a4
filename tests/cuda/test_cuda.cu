// The CUDA backend. Suite "cuda_host" runs anywhere (error reporting, RAII without a device, the
// head permutations on the CPU). Suite "cuda_device" needs a GPU: the fused kernels against the
// CPU oracle (forward and backward, every score, the device masks, float and bf16, odd sizes),
// against the host emulation of the same block programs, at a long length with Dh = 128, and
// cuda::MultiHeadAttention against the CPU module. Without a GPU, main() exits 77 for the device
// suite, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <attn/attention/flash_host.hpp>
#include <attn/cuda/blas.cuh>
#include <attn/cuda/flash_attention.cuh>
#include <attn/cuda/multi_head.cuh>
#include <cstdio>
#include <cstring>
#include <string>

#include "../attention/flash_fixture.hpp"
#include "../test_util.hpp"

using attn::bf16;
using attn::index_t;
using attn::Shape;
using attn::Tensor;
namespace cuda = attn::cuda;
namespace mask = attn::mask;
namespace score = attn::score;
using namespace attn::test;

namespace {

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// The fused kernels on the device for a problem, back on the host in double.
template <class T, class Score, class Mask>
FlashOracle run_on_device(const FlashProblem& p, const Mask& m) {
  const auto q = cuda::to_device<T>(as<float>(p.q)), k = cuda::to_device<T>(as<float>(p.k)),
             v = cuda::to_device<T>(as<float>(p.v)), dout = cuda::to_device<T>(as<float>(p.dout));
  const cuda::DeviceAttention<T> f = cuda::flash_attention(q, k, v, Score{}, m);
  const cuda::DeviceAttentionGradients<T> g =
      cuda::flash_attention_backward(q, k, v, f, dout, Score{}, m);
  return {as<double>(cuda::to_host(f.out)), as<double>(cuda::to_host(f.lse)),
          as<double>(cuda::to_host(g.dq)), as<double>(cuda::to_host(g.dk)),
          as<double>(cuda::to_host(g.dv))};
}

}  // namespace

TEST_SUITE("cuda_host") {
  TEST_CASE("ATTN_CUDA_CHECK and ATTN_CUBLAS_CHECK throw cuda_error naming the call and error") {
    const std::string m =
        message_of<attn::cuda_error>([] { ATTN_CUDA_CHECK(cudaErrorInvalidValue); });
    CHECK(contains(m, "cudaErrorInvalidValue"));
    CHECK(contains(m, "invalid argument"));
    CHECK(contains(m, "failed"));
    const std::string b =
        message_of<attn::cuda_error>([] { ATTN_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); });
    CHECK(contains(b, "CUBLAS_STATUS_INVALID_VALUE"));
    // cuda_error is an attn::error, so one catch takes every attn failure.
    CHECK_FALSE(message_of<attn::error>([] { ATTN_CUDA_CHECK(cudaErrorInvalidValue); }).empty());
  }

  TEST_CASE("DeviceBuffer: a failing cudaMalloc throws cuda_error, with a GPU or without one") {
    // 2^48 floats: out of memory on any GPU, and no device (or driver) on a machine without.
    const std::string m =
        message_of<attn::cuda_error>([] { cuda::DeviceBuffer<float> b(1ull << 48); });
    CHECK(contains(m, "cudaMalloc"));
    cuda::DeviceBuffer<float> empty(0);  // no CUDA call at all
    CHECK(empty.empty());
    CHECK(empty.data() == nullptr);
    empty.free();
  }

  TEST_CASE("head permutations: split is transpose(1, 2) of [B, T, n, Dh], merge undoes it") {
    const cuda::HeadLayout L{2, 5, 3, 4};
    for (index_t e = 0; e < L.size(); ++e) {
      // dst [b, h, t, d] holds src [b, t, h, d]
      const index_t d = e % 4, t = (e / 4) % 5, h = (e / 20) % 3, b = e / 60;
      CHECK(L.split_source(e) == ((b * 5 + t) * 3 + h) * 4 + d);
      CHECK(L.split_source(L.merge_source(e)) == e);
      CHECK(L.merge_source(L.split_source(e)) == e);
    }
  }

  TEST_CASE("row-major GEMMs through column-major cuBLAS arguments equal the plain product") {
    // BLAS's column-major sgemm by its definition: C(i, j) = alpha Σ_l op(X)(i, l) op(Y)(l, j)
    // + beta C(i, j), with X(i, l) = x[i + l·ldx].
    auto sgemm = [](bool tx, bool ty, int m, int n, int k, float alpha, const float* x, int ldx,
                    const float* y, int ldy, float beta, float* c, int ldc) {
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double sum = 0;
          for (int l = 0; l < k; ++l)
            sum += double(tx ? x[l + i * ldx] : x[i + l * ldx]) *
                   double(ty ? y[j + l * ldy] : y[l + j * ldy]);
          c[i + j * ldc] = float(alpha * sum + beta * c[i + j * ldc]);
        }
    };
    attn::Rng rng(27);
    const int M = 5, N = 7, K = 3;
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        // A stored [M, K] or [K, M]; B stored [K, N] or [N, K]; all row-major.
        const auto a = Tensor<float>::randn(ta ? Shape{K, M} : Shape{M, K}, rng);
        const auto b = Tensor<float>::randn(tb ? Shape{N, K} : Shape{K, N}, rng);
        const auto c0 = Tensor<float>::randn({M, N}, rng);
        Tensor<float> c = c0;
        const cuda::ColumnMajorGemm g = cuda::column_major_gemm(ta, tb, M, N, K);
        sgemm(g.trans_first, g.trans_second, g.m, g.n, g.k, 0.5f, b.data(), g.ld_first, a.data(),
              g.ld_second, 2.0f, c.data(), g.ldc);
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double want = 0;
            for (int l = 0; l < K; ++l)
              want += double(ta ? a(l, i) : a(i, l)) * double(tb ? b(j, l) : b(l, j));
            CHECK(c(i, j) == doctest::Approx(0.5 * want + 2.0 * c0(i, j)).epsilon(1e-5));
          }
      }
  }

  TEST_CASE("device_count answers without throwing") {
    std::string why;
    const int n = cuda::device_count(&why);
    CHECK(n >= 0);
    if (n == 0) CHECK_FALSE(why.empty());
  }
}

TEST_SUITE("cuda_device") {
  // One score x mask x element type at every size of flash_sizes. The forward is held to the
  // reference attention (plain loops, double); the backward to the host emulation of the same block
  // programs, which test_flash_block.cpp holds to the tape's gradients for every score x mask (one
  // tape oracle per combination here would double this file's compile time). Not bit for bit: the
  // GPU's expf and FMA contraction differ from the host's.
  template <class T, class Score, class Mask>
  void check_against_cpu(const Score&, const Mask& m, std::uint64_t seed) {
    constexpr bool bf = std::is_same_v<T, bf16>;
    for (const FlashSize& z : flash_sizes) {
      CAPTURE(Score::name);
      CAPTURE(z.Tq);
      CAPTURE(z.Tk);
      const FlashProblem p = make_flash_problem(z, seed, bf);
      const FlashOracle gpu = run_on_device<T, Score>(p, m);
      const auto ref =
          attn::reference_attention(p.q, p.k, p.v, Score{}, attn::kernel::Softmax{}, m);
      // bf16 outputs carry 8 significant bits (half an ulp is 2^-9 relative).
      CHECK(attn::max_abs_diff(gpu.out, ref.out) < (bf ? 0x1p-8 : 2e-5) * magnitude(ref.out));
      const auto q = as<float>(p.q), k = as<float>(p.k), v = as<float>(p.v),
                 dout = as<float>(p.dout);
      const auto f = attn::emulate_flash_forward<T>(q, k, v, Score{}, m);
      const auto g = attn::emulate_flash_backward<T>(q, k, v, f, dout, Score{}, m);
      // bf16: twice test_flash_block.cpp's bounds against the oracle (each side may round a value
      // to the other neighbour, and O's rounding moves D).
      CHECK(lse_difference(gpu.lse, as<double>(f.lse)) < 1e-5 * magnitude(gpu.lse));
      CHECK(attn::max_abs_diff(gpu.dq, as<double>(g.dq)) <
            (bf ? 0x1p-5 : 1e-5) * magnitude(gpu.dq));
      CHECK(attn::max_abs_diff(gpu.dk, as<double>(g.dk)) <
            (bf ? 0x1p-5 : 1e-5) * magnitude(gpu.dk));
      CHECK(attn::max_abs_diff(gpu.dv, as<double>(g.dv)) <
            (bf ? 0x1p-7 : 1e-5) * magnitude(gpu.dv));
    }
  }

  // A soft cap that most scores of these problems reach (the default, 50, is far above them).
  struct CappedScore : score::SoftCap<score::ScaledDot> {
    CappedScore() { cap = 1.5; }
  };

  // Each score, each device mask and each element type at least once: eight kernel triples, each
  // compiled for two architectures (compile time is the budget here); test_flash_block.cpp runs
  // every combination of the same block programs on the CPU.
  TEST_CASE("fused kernels on the GPU (float): every score, every device mask") {
    check_against_cpu<float>(score::Dot{}, mask::None{}, 21);
    check_against_cpu<float>(score::ScaledDot{}, mask::Causal{}, 22);
    check_against_cpu<float>(score::ScaledDot{}, mask::CausalTopLeft{}, 23);
    check_against_cpu<float>(score::NegSqEuclidean{}, mask::SlidingWindow{5, 2}, 24);
    // A composition runs on the device from its parts' ATTN_HOST_DEVICE answers.
    check_against_cpu<float>(score::ScaledDot{},
                             mask::And{mask::Causal{}, mask::SlidingWindow{5, 2}}, 27);
    check_against_cpu<float>(CappedScore{}, mask::Causal{}, 28);  // the cap in the score tile
  }

  TEST_CASE("fused kernels on the GPU (bf16 in and out, float inside)") {
    check_against_cpu<bf16>(score::ScaledDot{}, mask::None{}, 25);
    check_against_cpu<bf16>(score::NegSqEuclidean{}, mask::Causal{}, 26);
  }

  TEST_CASE("a long causal sequence at head width 128 equals the CPU fused path") {
    // T = 1000: 16 query tiles, 32 key tiles, most of them skipped; Dh = 128 needs about 108 KiB
    // (forward) and 146 KiB (backward) of shared memory per block, above the 48 KiB default.
    attn::Rng rng(24);
    const index_t B = 1, H = 2, T = 1000, D = 128;
    const auto q = Tensor<float>::randn({B, H, T, D}, rng),
               k = Tensor<float>::randn({B, H, T, D}, rng),
               v = Tensor<float>::randn({B, H, T, D}, rng),
               r = Tensor<float>::randn({B, H, T, D}, rng);
    attn::Tape<float> tape;
    auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
    auto o = attn::online_softmax_attention(qv, kv, vv, score::ScaledDot{}, mask::Causal{});
    tape.backward(attn::sum(o * tape.leaf(r)));
    const auto dq = cuda::to_device(q), dk = cuda::to_device(k), dv = cuda::to_device(v),
               dr = cuda::to_device(r);
    const auto f = cuda::flash_attention(dq, dk, dv, score::ScaledDot{}, mask::Causal{});
    const auto g =
        cuda::flash_attention_backward(dq, dk, dv, f, dr, score::ScaledDot{}, mask::Causal{});
    CHECK(attn::max_abs_diff(cuda::to_host(f.out), o.value()) < 1e-4);
    CHECK(attn::max_abs_diff(cuda::to_host(g.dq), qv.grad()) < 1e-3);
    CHECK(attn::max_abs_diff(cuda::to_host(g.dk), kv.grad()) < 1e-3);
    CHECK(attn::max_abs_diff(cuda::to_host(g.dv), vv.grad()) < 1e-3);
  }

  TEST_CASE("bad input on the device entry points throws, naming the operation") {
    attn::Rng rng(25);
    const auto q = cuda::to_device(Tensor<float>::randn({1, 2, 5, 4}, rng));
    const auto k3 = cuda::to_device(Tensor<float>::randn({1, 1, 6, 3}, rng));
    const auto v = cuda::to_device(Tensor<float>::randn({1, 1, 6, 3}, rng));
    CHECK(contains(message_of<attn::shape_error>([&] { cuda::flash_attention(q, k3, v); }),
                   "cuda::flash_attention"));
    // Head width 1024 needs more shared memory per block than any GPU has.
    const auto wide = cuda::to_device(Tensor<float>::randn({1, 1, 8, 1024}, rng));
    CHECK(contains(message_of<attn::value_error>([&] { cuda::flash_attention(wide, wide, wide); }),
                   "shared memory"));
  }

  using CausalHost =
      attn::MultiHeadAttention<score::ScaledDot, attn::kernel::Softmax, mask::Causal>;

  // A host module and its GPU twin built from the same configuration (the same weights, and the
  // sink logits given): forward, dx and every parameter gradient against the CPU module.
  void check_module_against_cpu(const attn::MultiHeadConfig& c, std::size_t parameters,
                                const std::vector<float>& sink_logits = {}) {
    CausalHost cpu(c), twin(c);
    for (CausalHost* m : {&cpu, &twin})
      for (std::size_t h = 0; h < sink_logits.size(); ++h)
        m->sinks.value[static_cast<index_t>(h)] = sink_logits[h];
    attn::Rng rng(26);
    const auto x = Tensor<float>::randn({2, 37, 32}, rng),
               r = Tensor<float>::randn({2, 37, 32}, rng);
    attn::Tape<float> tape;
    auto xv = tape.leaf(x, true);
    auto y = cpu(xv, mask::Causal{});
    tape.backward(attn::sum(y * tape.leaf(r)));

    cuda::MultiHeadAttention<score::ScaledDot, mask::Causal> gpu(twin);
    const auto gy = gpu.forward(cuda::to_device(x), mask::Causal{});
    const auto gdx = gpu.backward(cuda::to_device(r));
    gpu.add_gradients_to(twin);
    CHECK(attn::max_abs_diff(cuda::to_host(gy), y.value()) < 1e-5);
    CHECK(attn::max_abs_diff(cuda::to_host(gdx), xv.grad()) < 1e-4);
    std::vector<Tensor<float>> want, got;
    cpu.for_each_parameter(
        [&](const std::string&, attn::Parameter<float>& p) { want.push_back(p.grad); });
    twin.for_each_parameter(
        [&](const std::string&, attn::Parameter<float>& p) { got.push_back(p.grad); });
    REQUIRE(want.size() == parameters);
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(attn::max_abs_diff(got[i], want[i]) < 1e-4);
    }
  }

  attn::MultiHeadConfig module_config(std::uint64_t seed) {
    attn::MultiHeadConfig c;
    c.d_model = 32;
    c.heads = 4;
    c.kv_heads = 2;
    c.init_std = 0.2;
    c.seed = seed;
    return c;
  }

  TEST_CASE("cuda::MultiHeadAttention forward and backward equal the CPU module") {
    check_module_against_cpu(module_config(5), 8);
  }

  TEST_CASE("cuda::MultiHeadAttention with sinks equals the CPU module, sink gradients included") {
    attn::MultiHeadConfig c = module_config(6);
    c.sinks = true;
    check_module_against_cpu(c, 9, {0.5f, -1.0f, 2.5f, 0.0f});  // the sinks are visited last
    c.sinks = false;
    c.position_bias = attn::LearnedPositionBias::t5;
    const CausalHost biased(c);
    CHECK(message_of<attn::value_error>([&] {
            cuda::MultiHeadAttention<score::ScaledDot, mask::Causal> refused(biased);
          }).find("learned position biases") != std::string::npos);
  }
}

// Without a GPU the device suite is not run: asked for alone, it exits 77 (ctest: skipped).
int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  std::string why;
  if (cuda::device_count(&why) == 0) {
    bool device_only = false;
    for (int i = 1; i < argc; ++i)
      device_only = device_only || std::strcmp(argv[i], "--test-suite=cuda_device") == 0;
    if (device_only) {
      std::printf("SKIPPED: no usable CUDA device (%s); the GPU tests were compiled, not run\n",
                  why.c_str());
      return 77;
    }
    context.addFilter("test-suite-exclude", "cuda_device");
  }
  return context.run();
}
