// Llama's normalisation and MLP against their definitions in PyTorch and transformers
// (data/torch_llama_pieces.txt, written by llama_pieces_reference.py): nn::RMSNorm is
// torch.nn.RMSNorm and nn::SwiGLU is transformers' LlamaMLP, values and every gradient, in
// double.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <string>

#include "../torch_reference_file.hpp"

namespace llama_pieces {

const attn::Tensor<double>& value(const std::string& name) {
  static const torch_reference::ReferenceFile file = torch_reference::load_reference(
      std::string(ATTN_TESTS_SOURCE_DIR) + "/nn/data/torch_llama_pieces.txt",
      "attn-torch-llama-pieces 1",
      "scripts/oracle-venv, then build/oracle-venv/bin/python tests/nn/llama_pieces_reference.py");
  return torch_reference::tensor(file, name);
}

}  // namespace llama_pieces

TEST_CASE("nn::RMSNorm is torch.nn.RMSNorm: values and gradients in double") {
  using llama_pieces::value;
  for (const std::string c : {"rms", "rms_eps"}) {
    CAPTURE(c);
    const attn::Tensor<double>& x = value(c + ".x");
    attn::nn::RMSNorm<double> norm(x.shape().last(), value(c + ".eps")[0]);
    norm.weight.value = value(c + ".weight");
    attn::Tape<double> tape;
    const attn::Var<double> xv = tape.leaf(x, true);
    const attn::Var<double> y = norm(xv);
    tape.backward(attn::sum(y * tape.leaf(value(c + ".r"))));
    torch_reference::check_close(c + " y", y.value(), value(c + ".y"), 1e-14);
    torch_reference::check_close(c + " grad x", xv.grad(), value(c + ".grad.x"), 1e-14);
    torch_reference::check_close(c + " grad weight", norm.weight.grad, value(c + ".grad.weight"),
                                 1e-13);
  }
}

TEST_CASE("nn::SwiGLU is transformers' LlamaMLP: values and gradients in double") {
  using llama_pieces::value;
  const attn::Tensor<double>& x = value("mlp.x");
  const attn::Tensor<double>& gate = value("mlp.gate_proj.weight");
  attn::Rng rng(1);
  attn::nn::SwiGLU<double> mlp(gate.shape()[1], gate.shape()[0], 0.1, 0.1, rng);
  mlp.gate.weight.value = gate;
  mlp.up.weight.value = value("mlp.up_proj.weight");
  mlp.down.weight.value = value("mlp.down_proj.weight");
  attn::Tape<double> tape;
  const attn::Var<double> xv = tape.leaf(x, true);
  const attn::Var<double> y = mlp(xv);
  tape.backward(attn::sum(y * tape.leaf(value("mlp.r"))));
  torch_reference::check_close("y", y.value(), value("mlp.y"), 1e-13);
  torch_reference::check_close("grad x", xv.grad(), value("mlp.grad.x"), 1e-13);
  torch_reference::check_close("grad gate", mlp.gate.weight.grad,
                               value("mlp.grad.gate_proj.weight"), 1e-13);
  torch_reference::check_close("grad up", mlp.up.weight.grad, value("mlp.grad.up_proj.weight"),
                               1e-13);
  torch_reference::check_close("grad down", mlp.down.weight.grad,
                               value("mlp.grad.down_proj.weight"), 1e-13);
}
