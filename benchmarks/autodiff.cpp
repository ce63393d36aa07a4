// benchmarks/autodiff.cpp: the autodiff engine against the same math written directly with Eigen,
// in one run: a 2-layer MLP SGD step and a 1024^3 float matmul (forward; forward + backward),
// at 1 and 2 threads, ending with a table of engine / Eigen time ratios.
// Does not time attention or modules; it measures what the tape, the expression templates and
// attn's fixed-block GEMM cost on top of the arithmetic they perform.
//
// Run: bench_autodiff --benchmark_repetitions=5     (ratios use the median of the repetitions)
//      bench_autodiff --attn_breakdown              (also times the engine step phase by phase)
//      bench_autodiff --attn_paired=3               (also times each family in interleaved rounds,
//                                                    3 s per family and thread count)
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <attn/attn.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

// OpenMP pragmas that vanish (instead of warning) in a build without OpenMP.
#ifdef _OPENMP
#define ATTN_BENCH_OMP(x) _Pragma(#x)
#else
#define ATTN_BENCH_OMP(x)
#endif

namespace {

using attn::index_t;
using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVec = Eigen::Matrix<float, 1, Eigen::Dynamic>;

// The MLP: x [B, I] -> relu(x W1 + b1) [B, H] -> logits [B, C] -> mean cross-entropy.
constexpr index_t kBatch = 256, kIn = 512, kHidden = 512, kClasses = 10;
constexpr float kLr = 0.01f;
// The matmul: [N, N] x [N, N].
constexpr index_t kN = 1024;

Mat to_eigen(const attn::Tensor<float>& t) {
  return t.matrix();
}

// ---- the same block split attn's gemm uses, written by hand with Eigen -------------------------

// C = op(A) op(B) with op(A) [M, K], op(B) [K, N]: the longer output dimension cut into blocks of
// attn::gemm_block_size (a function of the size only), one block per OpenMP iteration, Eigen
// single-threaded inside (it never threads inside a team of more than one).
// A is stored [M, K] or, with ta, [K, M]; B is stored [K, N] or, with tb, [N, K].
void split_gemm(const Mat& a, bool ta, const Mat& b, bool tb, Mat& c) {
  const index_t m = c.rows(), n = c.cols();
  const bool split_rows = m >= n;
  const index_t len = split_rows ? m : n;
  const index_t bs = attn::gemm_block_size(len);
  const index_t blocks = attn::block_count(len, bs);
  auto product = [&](auto&& out, const auto& lhs, const auto& rhs) { out.noalias() = lhs * rhs; };
ATTN_BENCH_OMP(omp parallel for schedule(static))
for (index_t blk = 0; blk < blocks; ++blk) {
  const index_t lo = blk * bs, cnt = std::min(bs, len - lo);
  if (split_rows) {
    auto out = c.middleRows(lo, cnt);
    if (!ta && !tb)
      product(out, a.middleRows(lo, cnt), b);
    else if (!ta && tb)
      product(out, a.middleRows(lo, cnt), b.transpose());
    else if (ta && !tb)
      product(out, a.middleCols(lo, cnt).transpose(), b);
    else
      product(out, a.middleCols(lo, cnt).transpose(), b.transpose());
  } else {
    auto out = c.middleCols(lo, cnt);
    if (!ta && !tb)
      product(out, a, b.middleCols(lo, cnt));
    else if (!ta && tb)
      product(out, a, b.middleRows(lo, cnt).transpose());
    else if (ta && !tb)
      product(out, a.transpose(), b.middleCols(lo, cnt));
    else
      product(out, a.transpose(), b.middleRows(lo, cnt).transpose());
  }
}
}

// ---- the MLP problem ----------------------------------------------------------------------------

struct MlpData {
  attn::Tensor<float> x, w1, b1, w2, b2;
  attn::Tensor<std::int32_t> targets;

  MlpData() {
    attn::Rng rng(2024);
    x = attn::Tensor<float>::randn({kBatch, kIn}, rng);
    w1 = attn::Tensor<float>::randn({kIn, kHidden}, rng, 0.0, 1.0 / std::sqrt(double(kIn)));
    b1 = attn::Tensor<float>::randn({kHidden}, rng, 0.0, 0.1);
    w2 =
        attn::Tensor<float>::randn({kHidden, kClasses}, rng, 0.0, 1.0 / std::sqrt(double(kHidden)));
    b2 = attn::Tensor<float>::randn({kClasses}, rng, 0.0, 0.1);
    targets = attn::Tensor<std::int32_t>({kBatch});
    for (auto& t : targets) t = static_cast<std::int32_t>(rng.uniform_int(kClasses));
  }
};

const MlpData& mlp_data() {
  static const MlpData d;
  return d;
}

// The step through the engine, written as a user of attn would write it.
struct EngineMlp {
  attn::Parameter<float> w1, b1, w2, b2;
  attn::Tensor<float> x;
  attn::Tensor<std::int32_t> targets;
  attn::Tape<float> tape;

  EngineMlp() {
    const MlpData& d = mlp_data();
    w1 = attn::Parameter<float>(d.w1);
    b1 = attn::Parameter<float>(d.b1);
    w2 = attn::Parameter<float>(d.w2);
    b2 = attn::Parameter<float>(d.b2);
    x = d.x;
    targets = d.targets;
  }

  float forward_backward() {
    auto xv = tape.leaf(x);
    auto W1 = tape.param(w1), B1 = tape.param(b1), W2 = tape.param(w2), B2 = tape.param(b2);
    attn::Var<float> h = attn::relu(attn::matmul(xv, W1) + B1);  // [B, H]
    auto loss = attn::cross_entropy(attn::matmul(h, W2) + B2, targets);
    tape.backward(loss);
    return loss.item();
  }

  void update() {
    for (attn::Parameter<float>* p : {&w1, &b1, &w2, &b2}) {
      p->value.array() -= kLr * p->grad.array();
      p->zero_grad();
    }
    tape.clear();
  }

  float step() {
    const float l = forward_backward();
    update();
    return l;
  }
};

// The same step written directly with Eigen. With `split`, every GEMM uses attn's block split
// (split_gemm) and the row-wise work is spread over OpenMP threads like attn's; without it, the
// GEMMs use Eigen's own threading and everything else runs on one thread.
struct EigenMlp {
  Mat x, w1, w2, z1, h, z2, g2, dh, dw1, dw2;
  RowVec b1, b2, db1, db2;
  std::vector<std::int32_t> targets;

  EigenMlp() {
    const MlpData& d = mlp_data();
    x = to_eigen(d.x);
    w1 = to_eigen(d.w1);
    w2 = to_eigen(d.w2);
    b1 = to_eigen(d.b1);
    b2 = to_eigen(d.b2);
    targets.assign(d.targets.begin(), d.targets.end());
    z1.resize(kBatch, kHidden);
    h.resize(kBatch, kHidden);
    z2.resize(kBatch, kClasses);
    g2.resize(kBatch, kClasses);
    dh.resize(kBatch, kHidden);
    dw1.resize(kIn, kHidden);
    dw2.resize(kHidden, kClasses);
    db1.resize(kHidden);
    db2.resize(kClasses);
  }

  template <bool Split>
  float step() {
    forward1<Split>();
    const float loss = forward2<Split>();
    backward<Split>();
    update();
    return loss;
  }

  template <bool Split>
  void forward1() {
    // forward: z1 = x W1 + b1, h = relu(z1), z2 = h W2 + b2
    if constexpr (Split) {
      split_gemm(x, false, w1, false, z1);
ATTN_BENCH_OMP(omp parallel for schedule(static))
for (index_t r = 0; r < kBatch; ++r) {
  z1.row(r) += b1;
  h.row(r) = z1.row(r).cwiseMax(0.0f);
}
    } else {
      z1.noalias() = x * w1;
      z1.rowwise() += b1;
      h = z1.cwiseMax(0.0f);
    }
  }

  template <bool Split>
  float forward2() {
    constexpr float inv_n = 1.0f / float(kBatch);
    double total = 0;
    if constexpr (Split)
      split_gemm(h, false, w2, false, z2);
    else
      z2.noalias() = h * w2;
    // softmax cross-entropy: loss = (1/n) Σ_r (lse_r − z2[r, t_r]), dz2 = (softmax − onehot) / n
    auto ce_row = [&](index_t r) {
      if constexpr (Split) z2.row(r) += b2;
      const float m = z2.row(r).maxCoeff();
      const float lse = m + std::log((z2.row(r).array() - m).exp().sum());
      g2.row(r) = (z2.row(r).array() - lse).exp() * inv_n;
      g2(r, targets[std::size_t(r)]) -= inv_n;
      return double(lse) - double(z2(r, targets[std::size_t(r)]));
    };
    if constexpr (Split) {
ATTN_BENCH_OMP(omp parallel for schedule(static) reduction(+ : total))
for (index_t r = 0; r < kBatch; ++r) total += ce_row(r);
    } else {
      z2.rowwise() += b2;
      for (index_t r = 0; r < kBatch; ++r) total += ce_row(r);
    }
    return float(total / double(kBatch));
  }

  template <bool Split>
  void backward() {
    // backward: dW2 = hᵀ g2, db2 = Σ_rows g2, dh = g2 W2ᵀ ∘ [z1 > 0], dW1 = xᵀ dh, db1 = Σ_rows dh
    if constexpr (Split) {
      split_gemm(h, true, g2, false, dw2);
      split_gemm(g2, false, w2, true, dh);
ATTN_BENCH_OMP(omp parallel for schedule(static))
for (index_t r = 0; r < kBatch; ++r) dh.row(r) = (z1.row(r).array() > 0.0f).select(dh.row(r), 0.0f);
split_gemm(x, true, dh, false, dw1);
constexpr index_t cb = 64;
ATTN_BENCH_OMP(omp parallel for schedule(static))
for (index_t blk = 0; blk < attn::block_count(kHidden, cb); ++blk)
  db1.segment(blk * cb, cb) = dh.middleCols(blk * cb, cb).colwise().sum();
    } else {
      dw2.noalias() = h.transpose() * g2;
      dh.noalias() = g2 * w2.transpose();
      dh = (z1.array() > 0.0f).select(dh, 0.0f);
      dw1.noalias() = x.transpose() * dh;
      db1 = dh.colwise().sum();
    }
    db2 = g2.colwise().sum();
  }

  void update() {
    w1 -= kLr * dw1;
    b1 -= kLr * db1;
    w2 -= kLr * dw2;
    b2 -= kLr * db2;
  }
};

// ---- the cases: each is a callable that performs one step, its state set up once ---------------

using Step = std::function<void()>;

Step mlp_engine() {
  auto m = std::make_shared<EngineMlp>();
  return [m] { benchmark::DoNotOptimize(m->step()); };
}

template <bool Split>
Step mlp_eigen() {
  auto m = std::make_shared<EigenMlp>();
  return [m] { benchmark::DoNotOptimize(m->step<Split>()); };
}

struct MatmulData {
  attn::Tensor<float> a, b;
  MatmulData() {
    attn::Rng rng(7);
    a = attn::Tensor<float>::randn({kN, kN}, rng);
    b = attn::Tensor<float>::randn({kN, kN}, rng);
  }
};

const MatmulData& matmul_data() {
  static const MatmulData d;
  return d;
}

// Engine forward: two leaves (copied into the tape, as a user's inputs are) and one matmul.
Step matmul_fwd_engine() {
  auto tape = std::make_shared<attn::Tape<float>>();
  return [tape] {
    const MatmulData& d = matmul_data();
    auto c = attn::matmul(tape->leaf(d.a), tape->leaf(d.b));
    benchmark::DoNotOptimize(c.value().data());
    tape->clear();
  };
}

// Engine forward on Parameters: no copy of the operands (isolates the cost of leaf()).
Step matmul_fwd_engine_param() {
  struct State {
    attn::Parameter<float> a{matmul_data().a}, b{matmul_data().b};
    attn::Tape<float> tape;
  };
  auto s = std::make_shared<State>();
  return [s] {
    auto c = attn::matmul(s->tape.param(s->a), s->tape.param(s->b));
    benchmark::DoNotOptimize(c.value().data());
    s->tape.clear();
  };
}

// attn::gemm called directly, no tape (isolates the cost of the block split).
Step matmul_fwd_attn_gemm() {
  auto c = std::make_shared<attn::Tensor<float>>(attn::Shape{kN, kN});
  return [c] {
    const MatmulData& d = matmul_data();
    attn::gemm(d.a.data(), false, d.b.data(), false, c->data(), kN, kN, kN);
    benchmark::DoNotOptimize(c->data());
  };
}

struct EigenMatmul {
  Mat a = to_eigen(matmul_data().a), b = to_eigen(matmul_data().b);
  Mat c = Mat(kN, kN), dc = Mat(kN, kN), da = Mat(kN, kN), db = Mat(kN, kN);
};

template <bool Split>
Step matmul_fwd_eigen() {
  auto m = std::make_shared<EigenMatmul>();
  return [m] {
    if constexpr (Split)
      split_gemm(m->a, false, m->b, false, m->c);
    else
      m->c.noalias() = m->a * m->b;
    benchmark::DoNotOptimize(m->c.data());
  };
}

// Engine forward + backward of loss = Σ C: dC = 1, dA = dC Bᵀ, dB = Aᵀ dC.
Step matmul_fwdbwd_engine() {
  auto tape = std::make_shared<attn::Tape<float>>();
  return [tape] {
    const MatmulData& d = matmul_data();
    auto a = tape->leaf(d.a, true), b = tape->leaf(d.b, true);
    auto loss = attn::sum(attn::matmul(a, b));
    tape->backward(loss);
    benchmark::DoNotOptimize(a.grad().data());
    benchmark::DoNotOptimize(b.grad().data());
    tape->clear();
  };
}

template <bool Split>
Step matmul_fwdbwd_eigen() {
  auto m = std::make_shared<EigenMatmul>();
  return [m] {
    if constexpr (Split)
      split_gemm(m->a, false, m->b, false, m->c);
    else
      m->c.noalias() = m->a * m->b;
    benchmark::DoNotOptimize(
        m->c.cast<double>().sum());  // the loss, summed in double like attn::sum
    m->dc.setOnes();
    if constexpr (Split) {
      split_gemm(m->dc, false, m->b, true, m->da);
      split_gemm(m->a, true, m->dc, false, m->db);
    } else {
      m->da.noalias() = m->dc * m->b.transpose();
      m->db.noalias() = m->a.transpose() * m->dc;
    }
    benchmark::DoNotOptimize(m->da.data());
    benchmark::DoNotOptimize(m->db.data());
  };
}

// ---- diagnosis: the fused elementwise node alone ------------------------------------------------

// h = relu(z + b) on [B, H] with a bias row, loss = Σ h, forward and backward: the MLP's
// elementwise node with nothing else around it but the sum.
Step relu_bias_engine() {
  struct State {
    attn::Tensor<float> z;
    attn::Parameter<float> b;
    attn::Tape<float> tape;
  };
  auto s = std::make_shared<State>();
  attn::Rng rng(5);
  s->z = attn::Tensor<float>::randn({kBatch, kHidden}, rng);
  s->b = attn::Parameter<float>(attn::Tensor<float>::randn({kHidden}, rng));
  return [s] {
    auto z = s->tape.leaf(s->z, true);
    attn::Var<float> h = attn::relu(z + s->tape.param(s->b));
    auto loss = attn::sum(h);
    s->tape.backward(loss);
    benchmark::DoNotOptimize(z.grad().data());
    s->b.zero_grad();
    s->tape.clear();
  };
}

Step relu_bias_eigen() {
  struct State {
    Mat z, h, dz;
    RowVec b, db;
  };
  auto s = std::make_shared<State>();
  attn::Rng rng(5);
  s->z = to_eigen(attn::Tensor<float>::randn({kBatch, kHidden}, rng));
  s->b = to_eigen(attn::Tensor<float>::randn({kHidden}, rng));
  s->h.resize(kBatch, kHidden);
  s->dz.resize(kBatch, kHidden);
  return [s] {
    s->h = (s->z.rowwise() + s->b).cwiseMax(0.0f);
    benchmark::DoNotOptimize(s->h.cast<double>().sum());
    // d loss / dz = [z + b > 0], d loss / db = Σ_rows d loss / dz
    s->dz = ((s->z.rowwise() + s->b).array() > 0.0f).cast<float>().matrix();
    s->db = s->dz.colwise().sum();
    benchmark::DoNotOptimize(s->db.data());
  };
}

// ---- diagnosis: the MLP's five GEMM shapes, attn::gemm against one Eigen product --------------

struct GemmShape {
  const char* name;
  index_t m, n, k;
  bool ta, tb;
};
// fwd1 = x W1, fwd2 = h W2, dW2 = hᵀ g2, dh = g2 W2ᵀ, dW1 = xᵀ dh.
constexpr GemmShape kGemmShapes[] = {
    {"fwd1_256x512x512", kBatch, kHidden, kIn, false, false},
    {"fwd2_256x10x512", kBatch, kClasses, kHidden, false, false},
    {"dW2_512x10x256_tn", kHidden, kClasses, kBatch, true, false},
    {"dh_256x512x10_nt", kBatch, kHidden, kClasses, false, true},
    {"dW1_512x512x256_tn", kIn, kHidden, kBatch, true, false},
};

Step gemm_shape(GemmShape s, bool eigen) {
  struct State {
    Mat a, b, c;
  };
  auto st = std::make_shared<State>();
  attn::Rng rng(11);
  st->a = to_eigen(attn::Tensor<float>::randn({s.ta ? s.k : s.m, s.ta ? s.m : s.k}, rng));
  st->b = to_eigen(attn::Tensor<float>::randn({s.tb ? s.n : s.k, s.tb ? s.k : s.n}, rng));
  st->c.resize(s.m, s.n);
  return [st, s, eigen] {
    if (!eigen)
      attn::gemm(st->a.data(), s.ta, st->b.data(), s.tb, st->c.data(), s.m, s.n, s.k);
    else if (!s.ta && !s.tb)
      st->c.noalias() = st->a * st->b;
    else if (!s.ta)
      st->c.noalias() = st->a * st->b.transpose();
    else
      st->c.noalias() = st->a.transpose() * st->b;
    benchmark::DoNotOptimize(st->c.data());
  };
}

struct Case {
  std::string name;
  std::function<Step()> make;
  benchmark::TimeUnit unit;
};

std::vector<Case> all_cases() {
  using benchmark::kMicrosecond;
  using benchmark::kMillisecond;
  std::vector<Case> cases = {
      {"mlp_step/engine", mlp_engine, kMicrosecond},
      {"mlp_step/eigen", mlp_eigen<false>, kMicrosecond},
      {"mlp_step/eigen_split", mlp_eigen<true>, kMicrosecond},
      {"matmul_fwd/engine", matmul_fwd_engine, kMillisecond},
      {"matmul_fwd/engine_param", matmul_fwd_engine_param, kMillisecond},
      {"matmul_fwd/attn_gemm", matmul_fwd_attn_gemm, kMillisecond},
      {"matmul_fwd/eigen", matmul_fwd_eigen<false>, kMillisecond},
      {"matmul_fwd/eigen_split", matmul_fwd_eigen<true>, kMillisecond},
      {"matmul_fwdbwd/engine", matmul_fwdbwd_engine, kMillisecond},
      {"matmul_fwdbwd/eigen", matmul_fwdbwd_eigen<false>, kMillisecond},
      {"matmul_fwdbwd/eigen_split", matmul_fwdbwd_eigen<true>, kMillisecond},
      {"relu_bias/engine", relu_bias_engine, kMicrosecond},
      {"relu_bias/eigen", relu_bias_eigen, kMicrosecond},
  };
  for (const GemmShape& s : kGemmShapes) {
    cases.push_back({std::string("gemm_") + s.name + "/attn_gemm",
                     [s] { return gemm_shape(s, false); }, kMicrosecond});
    cases.push_back({std::string("gemm_") + s.name + "/eigen", [s] { return gemm_shape(s, true); },
                     kMicrosecond});
  }
  return cases;
}

// Both sides use this thread count: OpenMP (attn's loops) and Eigen's own GEMM threads.
void set_threads(int t) {
  attn::set_num_threads(t);
  Eigen::setNbThreads(t);
}

void register_benchmarks() {
  for (const Case& c : all_cases()) {
    auto fn = [make = c.make](benchmark::State& state) {
      set_threads(static_cast<int>(state.range(0)));
      Step step = make();
      step();  // warm-up: sizes every tape buffer; later steps allocate nothing
      for (auto _ : state) step();
    };
    benchmark::RegisterBenchmark(c.name.c_str(), fn)
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime()
        ->Unit(c.unit);
  }
}

// ---- results: a console reporter that also keeps every time ------------------------------------

// Times in seconds per benchmark key ("mlp_step/engine/threads:1"), one per repetition or round.
using Times = std::map<std::string, std::vector<double>>;

class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const std::string key = r.run_name.function_name + "/" + r.run_name.args;
      const double seconds =
          r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      if (r.run_type == Run::RT_Iteration)
        times_[key].push_back(seconds);
      else if (r.aggregate_name == "median")
        medians_[key] = {seconds};
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // Every repetition's time; Google Benchmark's median alone when only aggregates were reported.
  Times times() const {
    Times t = medians_;
    for (const auto& [k, v] : times_) t[k] = v;
    return t;
  }

 private:
  Times times_, medians_;
};

// Median of the times under `key` and their spread, the interquartile range over the median
// (nearest-rank quartiles); false when absent.
bool median(const Times& times, const std::string& key, double& out, double& spread) {
  const auto it = times.find(key);
  if (it == times.end() || it->second.empty()) return false;
  std::vector<double> v = it->second;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  out = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  spread = (v[(3 * (n - 1) + 2) / 4] - v[(n - 1) / 4]) / out;
  return true;
}

struct Pair {
  std::string what, num, den;
};

std::vector<Pair> ratio_pairs() {
  std::vector<Pair> pairs = {
      {"MLP step: engine / Eigen (Eigen threads)", "mlp_step/engine", "mlp_step/eigen"},
      {"MLP step: engine / Eigen (attn's split)", "mlp_step/engine", "mlp_step/eigen_split"},
      {"matmul fwd: engine / Eigen", "matmul_fwd/engine", "matmul_fwd/eigen"},
      {"matmul fwd: engine / Eigen (attn's split)", "matmul_fwd/engine", "matmul_fwd/eigen_split"},
      {"matmul fwd: engine / engine(param)", "matmul_fwd/engine", "matmul_fwd/engine_param"},
      {"matmul fwd: engine(param) / attn::gemm", "matmul_fwd/engine_param", "matmul_fwd/attn_gemm"},
      {"matmul fwd: attn::gemm / Eigen", "matmul_fwd/attn_gemm", "matmul_fwd/eigen"},
      {"matmul fwd+bwd: engine / Eigen", "matmul_fwdbwd/engine", "matmul_fwdbwd/eigen"},
      {"matmul fwd+bwd: engine / Eigen (attn's split)", "matmul_fwdbwd/engine",
       "matmul_fwdbwd/eigen_split"},
      {"relu(z + b), sum, backward: engine / Eigen", "relu_bias/engine", "relu_bias/eigen"},
  };
  for (const GemmShape& s : kGemmShapes)
    pairs.push_back({std::string("gemm ") + s.name + ": attn::gemm / Eigen",
                     std::string("gemm_") + s.name + "/attn_gemm",
                     std::string("gemm_") + s.name + "/eigen"});
  return pairs;
}

void print_ratios(const Times& times, const char* title) {
  std::printf("\n%s\n", title);
  std::printf("%-48s %7s %12s %12s %7s %15s\n", "pair", "threads", "engine", "reference", "ratio",
              "spread eng/ref");
  for (const Pair& p : ratio_pairs())
    for (int t = 1; t <= 2; ++t) {
      const std::string suffix = "/threads:" + std::to_string(t);
      double num = 0, den = 0, sn = 0, sd = 0;
      if (!median(times, p.num + suffix, num, sn) || !median(times, p.den + suffix, den, sd))
        continue;
      std::printf("%-48s %7d %9.1f us %9.1f us %7.3f %6.1f%% %6.1f%%\n", p.what.c_str(), t,
                  num * 1e6, den * 1e6, num / den, sn * 100, sd * 100);
    }
  std::fflush(stdout);
}

// Interleaved timing, robust to a machine whose load changes during the run: the cases of one
// family ("mlp_step/...") are run one after another, round after round, each round timing one
// call of each, for about `seconds` per family and thread count. Keys as in Google Benchmark;
// --benchmark_filter selects the cases here too (matched against "name/threads:").
Times paired(double seconds, const std::string& filter) {
  using clock = std::chrono::steady_clock;
  std::map<std::string, std::vector<const Case*>> families;
  const std::vector<Case> cases = all_cases();
  const std::regex re(filter == "all" ? std::string(".") : filter);
  for (const Case& c : cases)
    if (std::regex_search(c.name + "/threads:", re))
      families[c.name.substr(0, c.name.find('/'))].push_back(&c);
  Times times;
  for (const auto& [family, members] : families)
    for (int t = 1; t <= 2; ++t) {
      set_threads(t);
      std::vector<Step> steps;
      for (const Case* c : members) {
        steps.push_back(c->make());
        steps.back()();
      }
      const auto start = clock::now();
      for (int round = 0;
           round < 5 || clock::now() - start < std::chrono::duration<double>(seconds); ++round)
        for (std::size_t i = 0; i < steps.size(); ++i) {
          const auto t0 = clock::now();
          steps[i]();
          times[members[i]->name + "/threads:" + std::to_string(t)].push_back(
              std::chrono::duration<double>(clock::now() - t0).count());
        }
    }
  return times;
}

// ---- checks and the phase breakdown
// --------------------------------------------------------------

// The engine and the direct Eigen step compute the same thing: compare one step's loss and updates.
void check_same_math() {
  attn::set_num_threads(1);
  Eigen::setNbThreads(1);
  EngineMlp e;
  EigenMlp d, s;
  const float le = e.step(), ld = d.step<false>(), ls = s.step<true>();
  const double dw1 = (to_eigen(e.w1.value) - d.w1).cwiseAbs().maxCoeff();
  const double dw1s = (to_eigen(e.w1.value) - s.w1).cwiseAbs().maxCoeff();
  const double db1 = (to_eigen(e.b1.value) - d.b1).cwiseAbs().maxCoeff();
  const double dw2 = (to_eigen(e.w2.value) - d.w2).cwiseAbs().maxCoeff();
  std::printf(
      "check: loss engine %.7f, Eigen %.7f, Eigen split %.7f; max |W1 diff| %.2e (split %.2e), "
      "|b1| %.2e, |W2| %.2e after one step\n",
      double(le), double(ld), double(ls), dw1, dw1s, db1, dw2);
  if (!(std::abs(le - ld) < 1e-4f && dw1 < 1e-5 && dw1s < 1e-5 && db1 < 1e-5 && dw2 < 1e-5)) {
    std::printf("check FAILED: the engine and Eigen steps differ\n");
    std::exit(1);
  }
}

// Times the engine step and the direct Eigen step (Eigen's threads) phase by phase with a wall
// clock, interleaved step by step; prints the median of each phase over `steps` steps.
void breakdown(int threads, int steps) {
  set_threads(threads);
  using clock = std::chrono::steady_clock;
  auto us = [](clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  EngineMlp m;
  EigenMlp d;
  m.step();
  d.step<false>();
  std::vector<double> ph[2][4];  // [engine, eigen][phase]
  for (int i = 0; i < steps; ++i) {
    auto t0 = clock::now();
    auto xv = m.tape.leaf(m.x);
    auto W1 = m.tape.param(m.w1), B1 = m.tape.param(m.b1), W2 = m.tape.param(m.w2),
         B2 = m.tape.param(m.b2);
    attn::Var<float> h = attn::relu(attn::matmul(xv, W1) + B1);
    auto t1 = clock::now();
    auto loss = attn::cross_entropy(attn::matmul(h, W2) + B2, m.targets);
    auto t2 = clock::now();
    m.tape.backward(loss);
    auto t3 = clock::now();
    m.update();
    auto t4 = clock::now();
    ph[0][0].push_back(us(t1 - t0));
    ph[0][1].push_back(us(t2 - t1));
    ph[0][2].push_back(us(t3 - t2));
    ph[0][3].push_back(us(t4 - t3));
    t0 = clock::now();
    d.forward1<false>();
    t1 = clock::now();
    benchmark::DoNotOptimize(d.forward2<false>());
    t2 = clock::now();
    d.backward<false>();
    t3 = clock::now();
    d.update();
    t4 = clock::now();
    ph[1][0].push_back(us(t1 - t0));
    ph[1][1].push_back(us(t2 - t1));
    ph[1][2].push_back(us(t3 - t2));
    ph[1][3].push_back(us(t4 - t3));
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const char* names[4] = {"layer 1 forward (x W1 + b1, relu)", "layer 2 forward + cross-entropy",
                          "backward", "SGD update (+ zero_grad, clear)"};
  std::printf("\nMLP step by phase, %d thread(s), median of %d interleaved steps\n", threads,
              steps);
  std::printf("%-36s %12s %12s %7s\n", "phase", "engine", "Eigen", "ratio");
  double te = 0, tr = 0;
  for (int p = 0; p < 4; ++p) {
    const double e = med(ph[0][p]), r = med(ph[1][p]);
    te += e;
    tr += r;
    std::printf("%-36s %9.1f us %9.1f us %7.3f\n", names[p], e, r, e / r);
  }
  std::printf("%-36s %9.1f us %9.1f us %7.3f\n", "sum of phase medians", te, tr, te / tr);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool want_breakdown = false;
  double paired_seconds = 0;
  std::string filter = ".";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_filter=", 19) == 0) filter = argv[i] + 19;
    if (std::strcmp(argv[i], "--attn_breakdown") == 0)
      want_breakdown = true;
    else if (std::strncmp(argv[i], "--attn_paired=", 14) == 0)
      paired_seconds = std::atof(argv[i] + 14);
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf(
      "attn autodiff benchmark: MLP %lldx%lld -> %lld relu -> %lld classes, SGD; matmul %lld^3 "
      "float; "
      "OpenMP max threads %d\n",
      static_cast<long long>(kBatch), static_cast<long long>(kIn), static_cast<long long>(kHidden),
      static_cast<long long>(kClasses), static_cast<long long>(kN), attn::num_threads());
  check_same_math();
  if (want_breakdown)
    for (int t = 1; t <= 2; ++t) breakdown(t, 500);
  register_benchmarks();
  Collector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios(reporter.times(),
               "ratios from the table above: real time, median of the repetitions, "
               "spread = interquartile range / median");
  if (paired_seconds > 0)
    print_ratios(paired(paired_seconds, filter),
                 "ratios from interleaved rounds (--attn_paired): median of the rounds, "
                 "spread = interquartile range / median");
  benchmark::Shutdown();
  return 0;
}
