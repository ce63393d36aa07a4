// Rotary positions against the Llama code of the transformers package (data/torch_rotary.txt,
// written by rotary_reference.py): rotary_rotation with RotaryPairs::halves turns q and k as
// apply_rotary_pos_emb does, with Llama 2's and Llama 3's bases, and passes the same gradients
// back. The paper's adjacent pairs are another model: they must not match.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <string>

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
