// A small MLP training step shared by the tape tests: matmul, a fused GELU expression with a
// bias, dropout, layer_norm, cross_entropy and an SGD update; exercises most of the engine.
#pragma once

#include <attn/attn.hpp>

namespace attn::test {

using attn::Tensor;

struct Mlp {
  attn::Parameter<float> w1, b1, w2, b2;
  Tensor<float> gain = Tensor<float>::ones({32});  // a constant layer-norm gain, made once
  explicit Mlp(attn::Rng& rng)
      : w1(Tensor<float>::randn({16, 32}, rng, 0, 0.3)),
        b1(Tensor<float>::zeros({32})),
        w2(Tensor<float>::randn({32, 4}, rng, 0, 0.3)),
        b2(Tensor<float>::zeros({4})) {}

  // One SGD step on (x, y); returns the loss.
  float step(attn::Tape<float>& tape, const Tensor<float>& x, const Tensor<std::int32_t>& y,
             attn::Rng& rng) {
    tape.clear();
    auto in = tape.leaf(x);
    auto h = attn::dropout(attn::gelu(attn::matmul(in, tape.param(w1)) + tape.param(b1)), 0.1, rng);
    auto hn = attn::layer_norm(h, tape.leaf(gain), tape.param(b1));
    auto logits = attn::matmul(hn, tape.param(w2)) + tape.param(b2);
    auto loss = attn::cross_entropy(logits, y);
    tape.backward(loss);
    for (auto* p : {&w1, &b1, &w2, &b2}) {
      p->value.array() -= 0.1f * p->grad.array();
      p->zero_grad();
    }
    return loss.item();
  }
};

}  // namespace attn::test
