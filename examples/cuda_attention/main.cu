// cuda_attention: runs the fused CUDA attention kernels forward and backward on random q, k, v
// and compares them with attn's CPU path (the online-softmax operator on the tape); with
// --module, runs cuda::MultiHeadAttention against the CPU MultiHeadAttention instead. With
// --emulate, the kernels' block programs run on the CPU (flash_host.hpp), so the same algorithm
// can be checked on a machine without a GPU.
//
//   cuda_attention [--batch 2] [--heads 8] [--length 1024] [--head-dim 64] [--mask causal]
//                  [--dtype float|bf16] [--reps 10] [--emulate] [--module]
//
// (Two masks, two element types: each combination compiles three kernels for two architectures,
// and the build's time is budgeted; the tests cover the other masks.)
//
// Exit status: 0 when the results agree, 1 when they do not, 2 for bad options, 77 when there is
// no GPU (and no --emulate).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <attn/attention/flash_host.hpp>
#include <attn/cuda/flash_attention.cuh>
#include <attn/cuda/multi_head.cuh>
#include <attn/cuda/timing.cuh>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../common/cli.hpp"

namespace {

using attn::index_t;
using attn::Tensor;
namespace cuda = attn::cuda;

struct Options {
  index_t batch = 2, heads = 8, length = 1024, head_dim = 64;
  std::string mask = "causal", dtype = "float";
  int reps = 10;
  bool emulate = false, module = false;
};

// Median milliseconds of `reps` runs of f (after one warm-up): CUDA events on the GPU, the
// steady clock in the emulation.
template <class F>
double median_ms(int reps, bool gpu, F&& f) {
  if (gpu) return cuda::median_ms(reps, f);
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// max |a − b| / max(1, max |b|)
double relative_error(const Tensor<float>& a, const Tensor<float>& b) {
  double scale = 1;
  for (const float x : b) scale = std::max(scale, double(std::abs(x)));
  return attn::max_abs_diff(a, b) / scale;
}

template <class E, class Mask>
bool run_kernels(const Options& o, const Mask& mask) {
  const attn::score::ScaledDot score;
  attn::Rng rng(1);
  const index_t B = o.batch, H = o.heads, T = o.length, D = o.head_dim;
  const auto q = Tensor<float>::randn({B, H, T, D}, rng),
             k = Tensor<float>::randn({B, H, T, D}, rng),
             v = Tensor<float>::randn({B, H, T, D}, rng),
             r = Tensor<float>::randn({B, H, T, D}, rng);
  // The CPU path, from the values the kernels see (bf16 rounds them).
  auto seen = [&](const Tensor<float>& t) {
    return attn::convert_elements<float>(attn::convert_elements<E>(t), t.shape());
  };
  attn::Tape<float> tape;
  auto qv = tape.leaf(seen(q), true), kv = tape.leaf(seen(k), true), vv = tape.leaf(seen(v), true);
  const auto t0 = std::chrono::steady_clock::now();
  auto out = attn::online_softmax_attention(qv, kv, vv, score, mask);
  tape.backward(attn::sum(out * tape.leaf(seen(r))));
  const double cpu_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  Tensor<float> o_k, dq, dk, dv;
  double fwd_ms = 0, bwd_ms = 0;
  if (o.emulate) {
    attn::FlashForwardResult<float> f;
    attn::FlashGradients<float> g;
    fwd_ms =
        median_ms(o.reps, false, [&] { f = attn::emulate_flash_forward<E>(q, k, v, score, mask); });
    bwd_ms = median_ms(o.reps, false,
                       [&] { g = attn::emulate_flash_backward<E>(q, k, v, f, r, score, mask); });
    o_k = f.out;
    dq = g.dq;
    dk = g.dk;
    dv = g.dv;
  } else {
    const auto dq_in = cuda::to_device<E>(q), dk_in = cuda::to_device<E>(k),
               dv_in = cuda::to_device<E>(v), dr = cuda::to_device<E>(r);
    cuda::DeviceAttention<E> f;
    cuda::DeviceAttentionGradients<E> g;
    fwd_ms = median_ms(o.reps, true,
                       [&] { cuda::flash_attention(dq_in, dk_in, dv_in, f, score, mask); });
    bwd_ms = median_ms(o.reps, true, [&] {
      cuda::flash_attention_backward(dq_in, dk_in, dv_in, f, dr, g, score, mask);
    });
    o_k = cuda::to_host(f.out);
    dq = cuda::to_host(g.dq);
    dk = cuda::to_host(g.dk);
    dv = cuda::to_host(g.dv);
  }
  const double e[4] = {relative_error(o_k, out.value()), relative_error(dq, qv.grad()),
                       relative_error(dk, kv.grad()), relative_error(dv, vv.grad())};
  // float: rounding of float sums; bf16: outputs and gradients stored with 8 significant bits.
  const double tol = std::is_same_v<E, float> ? 1e-4 : 2e-2;
  // Useful FLOPs: two products of Dh multiply-adds for every (query, key) pair the mask allows.
  double pairs = 0;
  for (index_t i = 0; i < T; ++i)
    for (index_t j = 0; j < T; ++j) pairs += mask.allowed(0, i, j, T, T) ? 1 : 0;
  const double flops = 4.0 * double(B * H) * pairs * double(D);
  std::printf("%s, %s: B=%lld H=%lld T=%lld Dh=%lld, mask %s\n",
              o.emulate ? "host emulation" : "GPU", o.dtype.c_str(), (long long)B, (long long)H,
              (long long)T, (long long)D, o.mask.c_str());
  std::printf("  forward  %9.3f ms  (%.3f %s, counting 4·Dh per allowed (query, key) pair)\n",
              fwd_ms, flops / (fwd_ms * (o.emulate ? 1e6 : 1e9)),
              o.emulate ? "GFLOP/s" : "TFLOP/s");
  std::printf("  backward %9.3f ms\n", bwd_ms);
  std::printf("  CPU path (online softmax, forward + backward, once): %.1f ms\n", cpu_ms);
  std::printf(
      "  max error relative to the CPU path: out %.2e, dq %.2e, dk %.2e, dv %.2e (bound %.0e)\n",
      e[0], e[1], e[2], e[3], tol);
  return std::all_of(std::begin(e), std::end(e), [&](double x) { return x < tol; });
}

template <class Mask>
bool run_module(const Options& o, const Mask& mask) {
  attn::MultiHeadConfig c;
  c.heads = o.heads;
  c.d_model = o.heads * o.head_dim;
  c.seed = 3;
  using Host = attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, Mask>;
  Host cpu(c), twin(c);
  attn::Rng rng(2);
  const auto x = Tensor<float>::randn({o.batch, o.length, c.d_model}, rng),
             r = Tensor<float>::randn({o.batch, o.length, c.d_model}, rng);
  attn::Tape<float> tape;
  auto xv = tape.leaf(x, true);
  auto y = cpu(xv, mask);
  tape.backward(attn::sum(y * tape.leaf(r)));
  cuda::MultiHeadAttention<attn::score::ScaledDot, Mask> gpu(twin);
  const auto dx_in = cuda::to_device(x), dr = cuda::to_device(r);
  cuda::DeviceTensor<float> gy, gdx;
  const double ms = median_ms(o.reps, true, [&] {
    gy = gpu.forward(dx_in, mask);
    gdx = gpu.backward(dr);
  });
  gpu.zero_grad();
  gy = gpu.forward(dx_in, mask);
  gdx = gpu.backward(dr);
  gpu.add_gradients_to(twin);
  double worst = std::max(relative_error(cuda::to_host(gy), y.value()),
                          relative_error(cuda::to_host(gdx), xv.grad()));
  std::vector<Tensor<float>> want;
  cpu.for_each_parameter(
      [&](const std::string&, attn::Parameter<float>& p) { want.push_back(p.grad); });
  std::size_t i = 0;
  twin.for_each_parameter([&](const std::string&, attn::Parameter<float>& p) {
    worst = std::max(worst, relative_error(p.grad, want[i++]));
  });
  std::printf("cuda::MultiHeadAttention, d_model %lld, %lld heads, B=%lld T=%lld, mask %s\n",
              (long long)c.d_model, (long long)o.heads, (long long)o.batch, (long long)o.length,
              o.mask.c_str());
  std::printf(
      "  forward + backward %.3f ms; max error relative to the CPU module %.2e (bound 1e-4)\n", ms,
      worst);
  return worst < 1e-4;
}

template <class T>
bool run(const Options& o) {
  auto with = [&](const auto& mask) {
    if (o.module) {
      if constexpr (std::is_same_v<T, float>) return run_module(o, mask);
      return false;  // rejected in main
    }
    return run_kernels<T>(o, mask);
  };
  return o.mask == "none" ? with(attn::mask::None{}) : with(attn::mask::Causal{});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuda_attention: attn's fused CUDA attention against its CPU path"};
  Options o;
  app.add_option("--batch", o.batch, "batch size")->check(CLI::Range(1, 1024));
  app.add_option("--heads", o.heads, "heads")->check(CLI::Range(1, 256));
  app.add_option("--length", o.length, "sequence length")->check(CLI::Range(1, 1 << 20));
  app.add_option("--head-dim", o.head_dim, "head width Dh")->check(CLI::Range(1, 1024));
  app.add_option("--mask", o.mask, "none or causal")->check(CLI::IsMember({"none", "causal"}));
  app.add_option("--dtype", o.dtype, "element type of q, k, v and the outputs")
      ->check(CLI::IsMember({"float", "bf16"}));
  app.add_option("--reps", o.reps, "timed repetitions (median reported)")
      ->check(CLI::Range(1, 10000));
  app.add_flag("--emulate", o.emulate, "run the kernels' block programs on the CPU instead");
  app.add_flag("--module", o.module, "run cuda::MultiHeadAttention (float) against the CPU module");
  try {
    app.parse(argc, argv);
    if (o.module && (o.emulate || o.dtype != "float"))
      throw CLI::ValidationError("--module", "runs on the GPU in float only");
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  std::string why;
  if (!o.emulate && cuda::device_count(&why) == 0) {
    std::printf(
        "cuda_attention: no usable CUDA device (%s); nothing was run.\n"
        "Run with --emulate to execute the kernels' block programs on the CPU.\n",
        why.c_str());
    return 77;
  }
  return examples::guarded([&] {
    const bool ok = o.dtype == "float" ? run<float>(o) : run<attn::bf16>(o);
    std::printf("%s\n", ok ? "agree" : "DISAGREE");
    return ok ? 0 : 1;
  });
}
