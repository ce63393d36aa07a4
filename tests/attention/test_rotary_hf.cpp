// Rotary positions against the Llama code of the transformers package (data/torch_rotary.txt,
// written by rotary_reference.py): rotary_rotation with RotaryPairs::halves turns q and k as
// apply_rotary_pos_emb does, with Llama 2's and Llama 3's bases, and passes the same gradients
// back. The paper's adjacent pairs are another model: they must not match. And the scalings
// (data/torch_rotary_scaling.txt, rotary_scaling_reference.py): linear, NTK-aware, YaRN and Llama
// 3's bands give the frequencies transformers computes and turn q and k as it does.
#include <doctest/doctest.h>

#include <array>
#include <attn/attn.hpp>
#include <string>
#include <vector>

#include "../torch_reference_file.hpp"

namespace rotary_hf {

using attn::Tensor;

const torch_reference::ReferenceFile& reference() {
  static const torch_reference::ReferenceFile file = torch_reference::load_reference(
      std::string(ATTN_TESTS_SOURCE_DIR) + "/attention/data/torch_rotary.txt",
      "attn-torch-rotary 1",
      "scripts/oracle-venv, then build/oracle-venv/bin/python tests/attention/rotary_reference.py");
  return file;
}

const Tensor<double>& value(const std::string& name) {
  return torch_reference::tensor(reference(), name);
}

const torch_reference::ReferenceFile& scaling_reference() {
  static const torch_reference::ReferenceFile file = torch_reference::load_reference(
      std::string(ATTN_TESTS_SOURCE_DIR) + "/attention/data/torch_rotary_scaling.txt",
      "attn-torch-rotary-scaling 1",
      "scripts/oracle-venv, then build/oracle-venv/bin/python "
      "tests/attention/rotary_scaling_reference.py");
  return file;
}

const Tensor<double>& scaled(const std::string& name) {
  return torch_reference::tensor(scaling_reference(), name);
}

}  // namespace rotary_hf

TEST_CASE("rotary_rotation, halves: Llama's apply_rotary_pos_emb, values and gradients") {
  using rotary_hf::value;
  for (const std::string c : {"llama2", "llama3"}) {
    CAPTURE(c);
    const auto p0 = static_cast<attn::index_t>(value(c + ".p0")[0]);
    const double base = value(c + ".base")[0];
    attn::Tape<double> tape;
    const attn::Var<double> q = tape.leaf(value(c + ".q"), true);
    const attn::Var<double> k = tape.leaf(value(c + ".k"), true);
    const auto halves = attn::RotaryPairs::halves;
    const attn::Var<double> q_out = attn::rotary_rotation(q, p0, base, halves);
    const attn::Var<double> k_out = attn::rotary_rotation(k, p0, base, halves);
    tape.backward(attn::sum(q_out * tape.leaf(value(c + ".r_q"))) +
                  attn::sum(k_out * tape.leaf(value(c + ".r_k"))));
    // Both sides form the angles in double and round cos and sin once (4.4e-16 seen).
    torch_reference::check_close(c + " q'", q_out.value(), value(c + ".q_out"), 1e-14);
    torch_reference::check_close(c + " k'", k_out.value(), value(c + ".k_out"), 1e-14);
    torch_reference::check_close(c + " grad q", q.grad(), value(c + ".grad.q"), 1e-14);
    torch_reference::check_close(c + " grad k", k.grad(), value(c + ".grad.k"), 1e-14);
    // The paper's adjacent pairs turn other coordinates together: not Llama's model.
    const attn::Tensor<double> adjacent = attn::rotary_rotation(q, p0, base).value();
    CHECK(attn::max_abs_diff(adjacent, value(c + ".q_out")) > 0.1);
  }
}

TEST_CASE(
    "rotary scalings: linear, NTK-aware, YaRN and Llama 3's bands as transformers applies them") {
  using rotary_hf::scaled;
  using Kind = attn::RotaryScaling::Kind;
  for (const std::string c : {"linear", "ntk", "yarn", "yarn_given", "llama3"}) {
    CAPTURE(c);
    const Tensor<double>& p = scaled(c + ".scaling");
    attn::RotaryScaling s;
    s.kind = std::array{Kind::none, Kind::linear, Kind::ntk, Kind::yarn,
                        Kind::llama3}[static_cast<std::size_t>(p[0])];
    s.factor = p[1];
    s.original_context = static_cast<attn::index_t>(p[2]);
    s.beta_fast = p[3];
    s.beta_slow = p[4];
    s.attention_factor = p[5];
    s.low_freq_factor = p[6];
    s.high_freq_factor = p[7];
    const auto p0 = static_cast<attn::index_t>(scaled(c + ".p0")[0]);
    const double base = scaled(c + ".base")[0];
    const Tensor<double>& theta = scaled(c + ".theta");
    const attn::index_t d = 2 * theta.numel();
    const std::vector<double> got = attn::rotary_frequencies(d, base, s);
    for (attn::index_t i = 0; i < theta.numel(); ++i)
      CHECK(got[static_cast<std::size_t>(i)] == doctest::Approx(theta[i]).epsilon(1e-14));
    CHECK(attn::rotary_attention_factor(s) == doctest::Approx(scaled(c + ".m")[0]).epsilon(1e-15));
    // The scaling changes the frequencies (a control: unscaled ones differ).
    const std::vector<double> plain = attn::rotary_frequencies(d, base, {});
    double moved = 0;
    for (std::size_t i = 0; i < plain.size(); ++i)
      moved = std::max(moved, std::abs(plain[i] - got[i]) / plain[i]);
    CHECK(moved > 0.1);
    attn::Tape<double> tape;
    const attn::Var<double> q = tape.leaf(scaled(c + ".q"), true);
    const attn::Var<double> k = tape.leaf(scaled(c + ".k"), true);
    const auto halves = attn::RotaryPairs::halves;
    const attn::Var<double> q_out = attn::rotary_rotation(q, p0, base, halves, s);
    const attn::Var<double> k_out = attn::rotary_rotation(k, p0, base, halves, s);
    tape.backward(attn::sum(q_out * tape.leaf(scaled(c + ".r_q"))) +
                  attn::sum(k_out * tape.leaf(scaled(c + ".r_k"))));
    torch_reference::check_close(c + " q'", q_out.value(), scaled(c + ".q_out"), 1e-12);
    torch_reference::check_close(c + " k'", k_out.value(), scaled(c + ".k_out"), 1e-12);
    torch_reference::check_close(c + " grad q", q.grad(), scaled(c + ".grad.q"), 1e-12);
    torch_reference::check_close(c + " grad k", k.grad(), scaled(c + ".grad.k"), 1e-12);
  }
  attn::RotaryScaling bad;
  bad.kind = Kind::yarn;
  bad.factor = 2;
  CHECK_THROWS_WITH_AS(attn::rotary_frequencies(8, 10000.0, bad),
                       "RotaryScaling: yarn and llama3 need the original context (> 0), got 0",
                       attn::value_error);
  bad.kind = Kind::linear;
  bad.factor = 0.5;
  CHECK_THROWS_WITH_AS(attn::rotary_frequencies(8, 10000.0, bad),
                       "RotaryScaling: factor 0.5 must be finite and >= 1", attn::value_error);
}
