// Score biases with parameters (learned_bias.hpp: T5 buckets, learned ALiBi slopes, dense bias
// tensors) on the fused and the materialised path: against PyTorch (data/torch_kernels.txt, with
// T5's buckets from the transformers package), by finite differences, against the reference loops,
// the same bits on 1 and 2 threads, and their errors.
#include <doctest/doctest.h>

#include <attn/attention/reference.hpp>
#include <attn/attn.hpp>
#include <attn/autodiff/check_gradient.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "../module_gradients.hpp"
#include "../test_util.hpp"
#include "../torch_reference_file.hpp"
#include "kernel_test_helpers.hpp"

using attn::index_t;
using attn::Shape;
using attn::Tensor;
namespace kernel = attn::kernel;
namespace mask = attn::mask;
namespace score = attn::score;

namespace learned_bias_test {

using kernel_tests::normal_tensor;
const std::vector<attn::AttentionBackward>& plans = kernel_tests::backward_plans;
using kernel_tests::plan_name;
using kernel_tests::torch_value;

enum class Kind { t5, alibi, dense };

// The bias of `kind` on parameters theta (T5: settings from the reference file's `buckets`).
template <class T>
attn::LearnedBias<T> make_bias(Kind kind, const attn::Var<T>& theta, index_t max_distance = 128,
                               bool bidirectional = true) {
  switch (kind) {
    case Kind::t5:
      return attn::t5_relative_bias(theta, bidirectional, max_distance);
    case Kind::alibi:
      return attn::learned_alibi(theta);
    case Kind::dense:
      break;
  }
  return attn::dense_bias(theta);
}

template <class Mask>
void check_torch_case(const std::string& name, Kind kind, const Mask& m) {
  auto ref = [&](const std::string& t) -> const Tensor<double>& {
    return torch_value(name + "." + t);
  };
  index_t max_distance = 128;
  bool bidirectional = true;
  if (kind == Kind::t5) {
    max_distance = static_cast<index_t>(ref("buckets")[1]);
    bidirectional = ref("buckets")[2] != 0.0;
    REQUIRE(ref("buckets")[0] == double(ref("theta").shape()[1]));
  }
  constexpr double tol = 1e-10;  // double against double: rounding only
  attn::Attention<score::ScaledDot, kernel::Softmax, Mask> op{{}, {}, m};
  Tensor<double> fused_o_grads[4];  // q, k, v, theta of the loss sum(o ∘ r), fused
  for (const auto& plan : plans) {
    op.backward = plan;
    attn::Tape<double> tape;
    auto q = tape.leaf(ref("q"), true), k = tape.leaf(ref("k"), true),
         v = tape.leaf(ref("v"), true), theta = tape.leaf(ref("theta"), true);
    const auto bias = make_bias(kind, theta, max_distance, bidirectional);
    const auto p = op.partial(q, k, v, bias);
    tape.backward(attn::Var<double>(attn::sum(p.output * tape.leaf(ref("r"))) +
                                    attn::sum(p.lse * tape.leaf(ref("r_lse")))));
    const std::string what = name + " fused (" + plan_name(plan) + ") ";
    torch_reference::check_close(what + "o", p.output.value(), ref("o"), tol);
    torch_reference::check_close(what + "lse", p.lse.value(), ref("lse"), tol);
    torch_reference::check_close(what + "grad.q", q.grad(), ref("grad.q"), tol);
    torch_reference::check_close(what + "grad.k", k.grad(), ref("grad.k"), tol);
    torch_reference::check_close(what + "grad.v", v.grad(), ref("grad.v"), tol);
    torch_reference::check_close(what + "grad.theta", theta.grad(), ref("grad.theta"), tol);
    // The output alone through the plain operator: the same output, bit for bit.
    attn::Tape<double> plain;
    auto q2 = plain.leaf(ref("q"), true), k2 = plain.leaf(ref("k"), true),
         v2 = plain.leaf(ref("v"), true), theta2 = plain.leaf(ref("theta"), true);
    const auto o = op(q2, k2, v2, make_bias(kind, theta2, max_distance, bidirectional));
    CHECK(std::equal(o.value().data(), o.value().data() + o.value().numel(),
                     p.output.value().data()));
    plain.backward(attn::sum(o * plain.leaf(ref("r"))));
    fused_o_grads[0] = q2.grad();
    fused_o_grads[1] = k2.grad();
    fused_o_grads[2] = v2.grad();
    fused_o_grads[3] = theta2.grad();
  }
  // The materialised path: PyTorch's output, and the fused path's gradients of sum(o ∘ r).
  attn::Tape<double> tape;
  auto q = tape.leaf(ref("q"), true), k = tape.leaf(ref("k"), true), v = tape.leaf(ref("v"), true),
       theta = tape.leaf(ref("theta"), true);
  const auto o = op.materialized(q, k, v, make_bias(kind, theta, max_distance, bidirectional));
  tape.backward(attn::sum(o * tape.leaf(ref("r"))));
  const std::string what = name + " materialised ";
  torch_reference::check_close(what + "o", o.value(), ref("o"), tol);
  torch_reference::check_close(what + "grad.q", q.grad(), fused_o_grads[0], 1e-12);
  torch_reference::check_close(what + "grad.k", k.grad(), fused_o_grads[1], 1e-12);
  torch_reference::check_close(what + "grad.v", v.grad(), fused_o_grads[2], 1e-12);
  torch_reference::check_close(what + "grad.theta", theta.grad(), fused_o_grads[3], 1e-12);
}

// The bias of `kind` on theta as a dense [B, H, Tq, Tk] tensor, written out from its definition
// (t5_bucket for the buckets) for the reference loops.
Tensor<double> expanded(Kind kind, const Tensor<double>& theta, index_t B, index_t H, index_t Tq,
                        index_t Tk, index_t max_distance, bool bidirectional) {
  Tensor<double> out(Shape{B, H, Tq, Tk});
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h)
      for (index_t i = 0; i < Tq; ++i)
        for (index_t j = 0; j < Tk; ++j) {
          const index_t delta = i + Tk - Tq - j;
          if (kind == Kind::t5)
            out(b, h, i, j) =
                theta(h, attn::t5_bucket(delta, theta.shape()[1], max_distance, bidirectional));
          else if (kind == Kind::alibi)
            out(b, h, i, j) = -theta[h] * double(std::abs(delta));
          else
            out(b, h, i, j) = theta.shape().rank() == 4 ? theta(b, h, i, j) : theta(h, i, j);
        }
  return out;
}

}  // namespace learned_bias_test

using namespace learned_bias_test;

TEST_CASE("learned biases match PyTorch on the fused and the materialised path") {
  SUBCASE("T5 buckets, bidirectional, distances past max_distance, no mask") {
    check_torch_case("t5_bidirectional", Kind::t5, mask::None{});
  }
  SUBCASE("T5 buckets of a decoder (not bidirectional), causal, grouped queries, Tq < Tk") {
    check_torch_case("t5_causal", Kind::t5, mask::Causal{});
  }
  SUBCASE("ALiBi with learned slopes, causal") {
    check_torch_case("alibi_learned", Kind::alibi, mask::Causal{});
  }
  SUBCASE("a dense bias [H, Tq, Tk] shared by the batch") {
    check_torch_case("dense_shared", Kind::dense, mask::None{});
  }
  SUBCASE("a dense bias [B, H, Tq, Tk], causal") {
    check_torch_case("dense_batched", Kind::dense, mask::Causal{});
  }
}

TEST_CASE("T5 buckets: exact near, log-spaced far, the two directions apart") {
  // 32 buckets, bidirectional: 16 per direction, 8 exact, the rest log-spaced up to 128.
  CHECK(attn::t5_bucket(0, 32, 128, true) == 0);
  CHECK(attn::t5_bucket(7, 32, 128, true) == 7);
  CHECK(attn::t5_bucket(-1, 32, 128, true) == 17);  // a key after the query: the upper half
  CHECK(attn::t5_bucket(8, 32, 128, true) == 8);    // 8 + ⌊log(1) …⌋
  CHECK(attn::t5_bucket(16, 32, 128, true) == 10);  // 8 + ⌊log 2 / log 16 · 8⌋ = 8 + 2
  CHECK(attn::t5_bucket(127, 32, 128, true) == 15);
  CHECK(attn::t5_bucket(1000, 32, 128, true) == 15);
  CHECK(attn::t5_bucket(-1000, 32, 128, true) == 31);
  // Not bidirectional: keys after the query share bucket 0.
  CHECK(attn::t5_bucket(-5, 32, 128, false) == 0);
  CHECK(attn::t5_bucket(15, 32, 128, false) == 15);
  CHECK(attn::t5_bucket(16, 32, 128, false) == 16);
  CHECK(attn::t5_bucket(5000, 32, 128, false) == 31);
}

TEST_CASE("learned biases: gradients match finite differences on every plan") {
  const index_t B = 2, H = 2, Hk = 1, Tq = 7, Tk = 9, D = 3;
  const Tensor<double> q = normal_tensor<double>(Shape{B, H, Tq, D}, 1),
                       k = normal_tensor<double>(Shape{B, Hk, Tk, D}, 2),
                       v = normal_tensor<double>(Shape{B, Hk, Tk, 2}, 3),
                       r = normal_tensor<double>(Shape{B, H, Tq, 2}, 4),
                       r_lse = normal_tensor<double>(Shape{B, H, Tq}, 5);
  struct Case {
    const char* what;
    Kind kind;
    Tensor<double> theta;
    index_t max_distance;
    bool bidirectional;
  };
  const std::vector<Case> cases = {
      {"T5, bidirectional", Kind::t5, normal_tensor<double>(Shape{H, 8}, 6), 6, true},
      {"T5, one direction", Kind::t5, normal_tensor<double>(Shape{H, 6}, 7), 5, false},
      {"learned ALiBi", Kind::alibi, normal_tensor<double>(Shape{H}, 8, 0.3), 0, false},
      {"dense, shared", Kind::dense, normal_tensor<double>(Shape{H, Tq, Tk}, 9), 0, false},
      {"dense, batched", Kind::dense, normal_tensor<double>(Shape{B, H, Tq, Tk}, 10), 0, false}};
  auto check = [&](auto op, const char* path) {
    for (const Case& c : cases)
      for (const auto& plan : plans) {
        op.backward = plan;
        const auto result = attn::check_gradient(
            [&](const std::vector<attn::Var<double>>& x) {
              const auto bias = make_bias(c.kind, x[3], c.max_distance, c.bidirectional);
              if (std::string(path) == "materialised")
                return attn::Var<double>(
                    attn::sum(op.materialized(x[0], x[1], x[2], bias) * x[0].tape().leaf(r)));
              const auto p = op.partial(x[0], x[1], x[2], bias);
              return attn::Var<double>(attn::sum(p.output * x[0].tape().leaf(r)) +
                                       attn::sum(p.lse * x[0].tape().leaf(r_lse)));
            },
            {q, k, v, c.theta}, 1e-6, 1e-6);
        CHECK_MESSAGE(result.ok, c.what, " (", path, ", ", plan_name(plan), "): ", result.report());
      }
  };
  check(attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal>{}, "fused, causal");
  check(attn::Attention<score::ScaledDot, kernel::Softmax, mask::None>{}, "fused, no mask");
  // With the rest of the score's features: a soft cap over ALiBi's fixed bias plus the learned
  // one, and dropout on the weights.
  attn::Attention<score::SoftCap<score::Alibi>, kernel::Softmax, mask::Causal> capped;
  capped.score.cap = 1.5;
  capped.dropout = attn::AttentionDropout{0.25, 3};
  check(capped, "fused, soft cap, ALiBi, dropout");
  check(attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal>{}, "materialised");
}

TEST_CASE("learned biases on the materialised path of other kernels match the reference loops") {
  const index_t B = 2, H = 2, Tq = 6, Tk = 10, D = 4;
  const Tensor<double> q = normal_tensor<double>(Shape{B, H, Tq, D}, 11),
                       k = normal_tensor<double>(Shape{B, H, Tk, D}, 12),
                       v = normal_tensor<double>(Shape{B, H, Tk, 3}, 13);
  const Tensor<double> theta = normal_tensor<double>(Shape{H, 8}, 14);
  const Tensor<double> full = expanded(Kind::t5, theta, B, H, Tq, Tk, 10, true);
  using Poly = kernel::Polynomial<2>;
  const auto want =
      attn::reference_attention(q, k, v, score::ScaledDot{}, Poly{}, mask::Causal{}, &full);
  attn::Attention<score::ScaledDot, Poly, mask::Causal> op;
  attn::Tape<double> tape;
  auto th = tape.leaf(theta, true);
  const auto o = op(tape.leaf(q), tape.leaf(k), tape.leaf(v), attn::t5_relative_bias(th, true, 10));
  for (index_t i = 0; i < o.value().numel(); ++i)
    CHECK(o.value()[i] == doctest::Approx(want.out[i]).epsilon(1e-12));
  // And the softmax fused path against the same loops, with learned ALiBi slopes.
  const Tensor<double> slopes = attn::alibi_slopes<double>(H);
  const Tensor<double> alibi = expanded(Kind::alibi, slopes, B, H, Tq, Tk, 0, false);
  const auto want_softmax = attn::reference_attention(q, k, v, score::ScaledDot{},
                                                      kernel::Softmax{}, mask::Causal{}, &alibi);
  attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal> softmax;
  const auto os = softmax(tape.leaf(q), tape.leaf(k), tape.leaf(v),
                          attn::learned_alibi(tape.leaf(slopes, true)));
  for (index_t i = 0; i < os.value().numel(); ++i)
    CHECK(os.value()[i] == doctest::Approx(want_softmax.out[i]).epsilon(1e-12));
}

TEST_CASE("learned ALiBi at the paper's slopes is score::Alibi, bit for bit (double)") {
  const Tensor<double> q = normal_tensor<double>(Shape{2, 4, 70, 8}, 15),
                       k = normal_tensor<double>(Shape{2, 4, 70, 8}, 16),
                       v = normal_tensor<double>(Shape{2, 4, 70, 5}, 17);
  attn::Tape<double> tape;
  const auto fixed = attn::Attention<score::Alibi, kernel::Softmax, mask::Causal>{}(
      tape.leaf(q), tape.leaf(k), tape.leaf(v));
  const auto learned = attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal>{}(
      tape.leaf(q), tape.leaf(k), tape.leaf(v),
      attn::learned_alibi(tape.leaf(attn::alibi_slopes<double>(4), true)));
  CHECK(std::equal(fixed.value().data(), fixed.value().data() + fixed.value().numel(),
                   learned.value().data()));
}

TEST_CASE("learned-bias gradients have the same bits on 1 and on 2 threads") {
  using T = float;
  const index_t B = 2, H = 4, Hk = 2, Tq = 200, Tk = 200, D = 16;
  const Tensor<T> q = normal_tensor<T>(Shape{B, H, Tq, D}, 18),
                  k = normal_tensor<T>(Shape{B, Hk, Tk, D}, 19),
                  v = normal_tensor<T>(Shape{B, Hk, Tk, D}, 20),
                  r = normal_tensor<T>(Shape{B, H, Tq, D}, 21);
  const Tensor<T> table = normal_tensor<T>(Shape{H, 32}, 22), slopes = attn::alibi_slopes<T>(H),
                  dense = normal_tensor<T>(Shape{H, Tq, Tk}, 23);
  auto grads = [&](const attn::AttentionBackward& plan) {
    attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal> op;
    op.backward = plan;
    attn::Tape<T> tape;
    auto th = tape.leaf(table, true), sl = tape.leaf(slopes, true), de = tape.leaf(dense, true);
    auto qv = tape.leaf(q, true);
    const auto o = op(qv, tape.leaf(k), tape.leaf(v), attn::t5_relative_bias(th));
    const auto o2 = op(qv, tape.leaf(k), tape.leaf(v), attn::learned_alibi(sl));
    const auto o3 = op(qv, tape.leaf(k), tape.leaf(v), attn::dense_bias(de));
    tape.backward(attn::sum((o + o2 + o3) * tape.leaf(r)));
    return std::vector<Tensor<T>>{th.grad(), sl.grad(), de.grad(), qv.grad()};
  };
  kernel_tests::same_bits_on_1_and_2_threads(grads);
}

TEST_CASE("learned biases: wrong shapes and settings are clear errors") {
  attn::Tape<double> tape;
  const auto q = tape.leaf(normal_tensor<double>(Shape{1, 2, 5, 4}, 24)),
             k = tape.leaf(normal_tensor<double>(Shape{1, 2, 6, 4}, 25)),
             v = tape.leaf(normal_tensor<double>(Shape{1, 2, 6, 3}, 26));
  const attn::Attention<score::ScaledDot, kernel::Softmax, mask::None> op;
  auto error = [&](const attn::LearnedBias<double>& bias) {
    return attn::test::message_of<attn::shape_error>([&] { (void)op(q, k, v, bias); });
  };
  auto value_error = [&](const attn::LearnedBias<double>& bias) {
    return attn::test::message_of<attn::value_error>([&] { (void)op(q, k, v, bias); });
  };
  CHECK(error(attn::t5_relative_bias(tape.leaf(Tensor<double>(Shape{3, 32})))) ==
        "attention: a T5 bias table must be [H = 2, num_buckets], got [3, 32]");
  CHECK(value_error(attn::t5_relative_bias(tape.leaf(Tensor<double>(Shape{2, 3})))) ==
        "attention: a bidirectional T5 bias needs at least 4 buckets, got 3");
  CHECK(value_error(attn::t5_relative_bias(tape.leaf(Tensor<double>(Shape{2, 32})), true, 8)) ==
        "attention: the T5 bias's max_distance (8) must exceed its 8 exact buckets");
  CHECK(error(attn::learned_alibi(tape.leaf(Tensor<double>(Shape{2, 1})))) ==
        "attention: learned ALiBi slopes must be [H = 2], got [2, 1]");
  CHECK(error(attn::dense_bias(tape.leaf(Tensor<double>(Shape{2, 6, 5})))) ==
        "attention: a dense bias must be [H, Tq, Tk] = [2, 5, 6] or [B, H, Tq, Tk] = [1, 2, 5, "
        "6], got [2, 6, 5]");
  CHECK(attn::test::message_of<attn::value_error>([&] { (void)attn::alibi_slopes<double>(0); }) ==
        "alibi_slopes: heads must be positive, got 0");
}

TEST_CASE("MultiHeadAttention with config.position_bias: T5 buckets or learned ALiBi slopes") {
  using Mha =
      attn::MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::Causal,
                               attn::Heads<attn::dynamic>, attn::projection::Separate, double>;
  attn::MultiHeadConfig c{.d_model = 12, .heads = 4, .kv_heads = 2, .seed = 7};
  attn::Rng rng(41);
  const Tensor<double> x = Tensor<double>::randn({2, 6, 12}, rng);  // check_decode: T = 6
  SUBCASE("T5: a parameter position_bias [H, buckets], 0 at the start, visited last") {
    c.position_bias = attn::LearnedPositionBias::t5;
    c.t5_buckets = 6;
    c.t5_max_distance = 5;
    c.t5_bidirectional = false;
    Mha m(c);
    std::vector<std::string> names;
    m.for_each_parameter(
        [&](const std::string& n, attn::Parameter<double>&) { names.push_back(n); });
    CHECK(names.back() == "position_bias");
    CHECK(m.position_bias.shape() == (Shape{4, 6}));
    for (index_t e = 0; e < m.position_bias.value.numel(); ++e)
      CHECK(m.position_bias.value[e] == 0.0);
    for (index_t e = 0; e < m.position_bias.value.numel(); ++e)
      m.position_bias.value[e] = 0.3 * std::sin(double(e));
    attn::test::check_gradients(m, x, [&](const attn::Var<double>& in) { return m(in); });
    attn::test::check_decode(m, x);
  }
  SUBCASE("learned ALiBi: the paper's slopes at the start, then trained") {
    c.position_bias = attn::LearnedPositionBias::alibi;
    c.sinks = true;  // with sinks too
    Mha m(c);
    for (index_t h = 0; h < 4; ++h) CHECK(m.position_bias.value[h] == score::Alibi::slope(h, 4));
    for (index_t h = 0; h < 4; ++h) m.sinks.value[h] = 0.2 * double(h);
    attn::test::check_gradients(m, x, [&](const attn::Var<double>& in) { return m(in); });
    attn::test::check_decode(m, x);
  }
  SUBCASE("refused where there are no per-pair scores, and bad T5 settings") {
    c.position_bias = attn::LearnedPositionBias::t5;
    using Linear =
        attn::MultiHeadAttention<score::ScaledDot, kernel::EluPlusOne, mask::Causal,
                                 attn::Heads<attn::dynamic>, attn::projection::Separate, double>;
    CHECK(attn::test::message_of<attn::value_error>([&] { Linear l(c); }) ==
          "MultiHeadAttention: a learned position bias (config.position_bias) needs a score "
          "kernel (not a feature map) with a quadratic or transformed score");
    c.t5_buckets = 3;
    CHECK(attn::test::message_of<attn::value_error>([&] { Mha m(c); }) ==
          "MultiHeadAttention: a bidirectional T5 bias needs at least 4 buckets, got 3");
  }
}
