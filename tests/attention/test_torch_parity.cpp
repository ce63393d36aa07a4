// Parity with PyTorch: MultiHeadAttention (causal, key padding, cross-attention; rotary positions
// and ALiBi) and the per-head Attention operator, outputs and every gradient, against values CPU
// PyTorch computed in float64.
// Does not run PyTorch: tests/attention/torch_reference.py wrote data/torch_parity.txt once.
#include <doctest/doctest.h>

#include "../torch_reference_file.hpp"

#include <attn/attention/multi_head.hpp>
#include <attn/attention/reference.hpp>
#include <attn/attn.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using attn::index_t;
using attn::Shape;
using attn::Tensor;

namespace {

constexpr double tolerance = 1e-5;  // max |attn − torch| allowed for every output and gradient
constexpr const char* format_line = "attn-torch-parity 1";

using torch_reference::cat;
using torch_reference::ReferenceFile;
using torch_reference::verbose;

ReferenceFile parse_reference(std::istream& in, const std::string& source) {
  return torch_reference::parse_reference(in, source, format_line);
}

ReferenceFile load_reference(const std::string& path) {
  return torch_reference::load_reference(path, format_line,
                                         "/usr/bin/python3 tests/attention/torch_reference.py");
}

void check_close(const std::string& what, const Tensor<double>& actual,
                 const Tensor<double>& expected) {
  torch_reference::check_close(what, actual, expected, tolerance);
}

const ReferenceFile& reference() {
  static const ReferenceFile file =
      load_reference(std::string(ATTN_TESTS_SOURCE_DIR) + "/attention/data/torch_parity.txt");
  return file;
}

// The tensor `name`, or a failed REQUIRE naming it.
const Tensor<double>& need(const std::string& name) {
  return torch_reference::tensor(reference(), name);
}

// Rows [r0, r1) of a rank-1 or rank-2 tensor.
Tensor<double> rows(const Tensor<double>& t, index_t r0, index_t r1) {
  const index_t width = t.rank() == 2 ? t.shape()[1] : 1;
  Tensor<double> out(t.rank() == 2 ? Shape{r1 - r0, width} : Shape{r1 - r0});
  std::copy(t.data() + r0 * width, t.data() + r1 * width, out.data());
  return out;
}

// Stacks rank-1 or rank-2 tensors along the first axis.
Tensor<double> stack_rows(const std::vector<const Tensor<double>*>& parts) {
  index_t n = 0;
  for (const auto* p : parts) n += p->shape()[0];
  const Tensor<double>& first = *parts.front();
  Tensor<double> out(first.rank() == 2 ? Shape{n, first.shape()[1]} : Shape{n});
  double* dst = out.data();
  for (const auto* p : parts) dst = std::copy(p->data(), p->data() + p->numel(), dst);
  return out;
}

void set_value(attn::Parameter<double>& p, const Tensor<double>& value, const std::string& what) {
  REQUIRE_MESSAGE(p.value.shape() == value.shape(), what, ": attn parameter shape ",
                  p.value.shape(), " but torch's is ", value.shape());
  p.value = value;
  p.zero_grad();
}

// ---- the cases ---------------------------------------------------------------------------------

template <class Mask, class Score = attn::score::ScaledDot>
using Mha = attn::MultiHeadAttention<Score, attn::kernel::Softmax, Mask, attn::Heads<attn::dynamic>,
                                     attn::projection::Separate, double>;

// nn.MultiheadAttention case `name` (self-attention, or cross-attention when the file holds
// `memory`) against attn's MultiHeadAttention with `mask` (and `Score`: the positional cases
// write the module out with rotary positions or ALiBi).
template <class Score = attn::score::ScaledDot, class Mask>
void check_module(const std::string& name, bool cross, const Mask& mask) {
  auto ref = [&](const std::string& t) -> const Tensor<double>& { return need(name + "." + t); };
  const Tensor<double>& x = ref("x");
  REQUIRE_MESSAGE(x.rank() == 3, name, ".x must be [B, T, D], got ", x.shape());
  const index_t d = x.shape()[2];

  attn::MultiHeadConfig config;
  config.d_model = d;
  config.heads = static_cast<index_t>(ref("heads")[0]);
  config.bias = true;
  Mha<Mask, Score> mha(config);
  mha.training = false;
  const Tensor<double>& w_in = ref("in_proj_weight");  // [3D, D] = [W_q; W_k; W_v]
  const Tensor<double>& b_in = ref("in_proj_bias");    // [3D]
  REQUIRE_MESSAGE(w_in.shape() == (Shape{3 * d, d}), name, ".in_proj_weight is ", w_in.shape());
  REQUIRE_MESSAGE(b_in.shape() == (Shape{3 * d}), name, ".in_proj_bias is ", b_in.shape());
  set_value(mha.q_proj.weight, rows(w_in, 0, d), name + " q_proj.weight");
  set_value(mha.k_proj.weight, rows(w_in, d, 2 * d), name + " k_proj.weight");
  set_value(mha.v_proj.weight, rows(w_in, 2 * d, 3 * d), name + " v_proj.weight");
  set_value(mha.q_proj.bias, rows(b_in, 0, d), name + " q_proj.bias");
  set_value(mha.k_proj.bias, rows(b_in, d, 2 * d), name + " k_proj.bias");
  set_value(mha.v_proj.bias, rows(b_in, 2 * d, 3 * d), name + " v_proj.bias");
  set_value(mha.out_proj.weight, ref("out_proj.weight"), name + " out_proj.weight");
  set_value(mha.out_proj.bias, ref("out_proj.bias"), name + " out_proj.bias");

  attn::Tape<double> tape;
  const attn::Var<double> xv = tape.leaf(x, true);
  attn::Var<double> memory;
  if (cross) memory = tape.leaf(ref("memory"), true);
  const attn::Var<double> y = cross ? mha(xv, memory, mask) : mha(xv, mask);
  tape.backward(attn::sum(y * tape.leaf(ref("r"))));

  if (verbose()) std::cout << name << "\n";
  check_close(name + ".y", y.value(), ref("y"));
  check_close(name + ".grad.x", xv.grad(), ref("grad.x"));
  if (cross) check_close(name + ".grad.memory", memory.grad(), ref("grad.memory"));
  check_close(
      name + ".grad.in_proj_weight",
      stack_rows({&mha.q_proj.weight.grad, &mha.k_proj.weight.grad, &mha.v_proj.weight.grad}),
      ref("grad.in_proj_weight"));
  check_close(name + ".grad.in_proj_bias",
              stack_rows({&mha.q_proj.bias.grad, &mha.k_proj.bias.grad, &mha.v_proj.bias.grad}),
              ref("grad.in_proj_bias"));
  check_close(name + ".grad.out_proj.weight", mha.out_proj.weight.grad,
              ref("grad.out_proj.weight"));
  check_close(name + ".grad.out_proj.bias", mha.out_proj.bias.grad, ref("grad.out_proj.bias"));
}

attn::mask::Padding padding_of(const std::string& name) {
  const Tensor<double>& l = need(name + ".lengths");
  std::vector<index_t> lengths;
  for (const double v : l) lengths.push_back(static_cast<index_t>(v));
  return attn::mask::Padding(std::move(lengths));
}

// Per-head case `name`: softmax(Q Kᵀ/√Dh) V with an end-aligned causal mask, through Attention's
// automatic (fused online-softmax) and materialised paths, and the loop reference (forward only).
void check_per_head(const std::string& name) {
  auto ref = [&](const std::string& t) -> const Tensor<double>& { return need(name + "." + t); };
  using Op = attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal>;
  for (const bool materialized : {false, true}) {
    const std::string label = name + (materialized ? " [materialized]" : " [automatic]");
    const Op op{};
    attn::Tape<double> tape;
    const attn::Var<double> q = tape.leaf(ref("q"), true);
    const attn::Var<double> k = tape.leaf(ref("k"), true);
    const attn::Var<double> v = tape.leaf(ref("v"), true);
    const attn::Var<double> o = materialized ? op.materialized(q, k, v) : op(q, k, v);
    tape.backward(attn::sum(o * tape.leaf(ref("r"))));
    if (verbose()) std::cout << label << "\n";
    check_close(label + " o", o.value(), ref("o"));
    check_close(label + " grad.q", q.grad(), ref("grad.q"));
    check_close(label + " grad.k", k.grad(), ref("grad.k"));
    check_close(label + " grad.v", v.grad(), ref("grad.v"));
  }
  const auto r = attn::reference_attention(ref("q"), ref("k"), ref("v"), attn::score::ScaledDot{},
                                           attn::kernel::Softmax{}, attn::mask::Causal{});
  if (verbose()) std::cout << name << " [reference]\n";
  check_close(name + " [reference] o", r.out, ref("o"));
}

}  // namespace

TEST_CASE("the PyTorch reference file is present and well formed") {
  const ReferenceFile& file = reference();
  REQUIRE_MESSAGE(file.error.empty(), file.error);
  CHECK(file.tensors.size() > 0);
}

TEST_CASE("MultiHeadAttention matches torch.nn.MultiheadAttention") {
  SUBCASE("causal self-attention") {
    check_module("mha_causal", false, attn::mask::Causal{});
  }
  SUBCASE("self-attention with key padding") {
    check_module("mha_padding", false, padding_of("mha_padding"));
  }
  SUBCASE("cross-attention, Tq != Tk") {
    check_module("mha_cross", true, attn::mask::None{});
  }
  SUBCASE("cross-attention with key padding") {
    check_module("mha_cross_padding", true, padding_of("mha_cross_padding"));
  }
  SUBCASE("cross-attention, end-aligned causal") {
    check_module("mha_cross_causal", true, attn::mask::Causal{});
  }
}

TEST_CASE("rotary positions and ALiBi match their papers' formulas written out in PyTorch") {
  SUBCASE("rotary, causal, T = 7") {
    check_module<attn::score::Rotary>("rotary_causal", false, attn::mask::Causal{});
  }
  SUBCASE("rotary, causal, T = 133 (two key tiles)") {
    check_module<attn::score::Rotary>("rotary_long", false, attn::mask::Causal{});
  }
  SUBCASE("ALiBi, causal, T = 7, 6 heads") {
    check_module<attn::score::Alibi>("alibi_causal", false, attn::mask::Causal{});
  }
  SUBCASE("ALiBi, causal, T = 133 (two key tiles)") {
    check_module<attn::score::Alibi>("alibi_long", false, attn::mask::Causal{});
  }
}

TEST_CASE("Attention matches softmax(Q K^T / sqrt(Dh)) V computed by PyTorch") {
  SUBCASE("causal, T = 7") {
    check_per_head("head_causal");
  }
  SUBCASE("causal, Tq = 70, Tk = 100 (several tiles)") {
    check_per_head("head_causal_long");
  }
}

TEST_CASE("a missing or corrupt reference file is reported, not crashed on") {
  auto error_of = [](const std::string& text) {
    std::istringstream in(text);
    return parse_reference(in, "test").error;
  };
  const std::string head = std::string(format_line) + "\n";
  CHECK(load_reference("/nonexistent/torch_parity.txt").error.find("cannot open") !=
        std::string::npos);
  CHECK(error_of("").find("empty") != std::string::npos);
  CHECK(error_of("something else\n").find("first line") != std::string::npos);
  CHECK(error_of(head + "a 1 2 0.5 1.5\n").find("no 'end'") != std::string::npos);
  CHECK(error_of(head + "a 1 3 0.5 1.5\nend 1\n").find("missing or bad value") !=
        std::string::npos);
  CHECK(error_of(head + "a 1 2 0.5 x\nend 1\n").find("missing or bad value") != std::string::npos);
  CHECK(error_of(head + "a 1 1 0.5 1.5\nend 1\n").find("more values") != std::string::npos);
  CHECK(error_of(head + "a 9 1 0.5\nend 1\n").find("bad rank") != std::string::npos);
  CHECK(error_of(head + "a 1 1 0.5\na 1 1 0.5\nend 2\n").find("twice") != std::string::npos);
  CHECK(error_of(head + "a 1 1 0.5\nend 2\n").find("does not match") != std::string::npos);
  CHECK(error_of(head + "a 1 1 0.5\nend 1\nb 1 1 0.5\n").find("after the 'end'") !=
        std::string::npos);
  const ReferenceFile good = [&] {
    std::istringstream in(head + "# comment\na 2 1 2 0.5 -1.25\nend 1\n");
    return parse_reference(in, "test");
  }();
  REQUIRE(good.error.empty());
  CHECK(good.tensors.at("a").shape() == (Shape{1, 2}));
  CHECK(good.tensors.at("a")[1] == -1.25);
}
