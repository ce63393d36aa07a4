// attn/nn/layers.hpp: the small modules a transformer is built from: Linear, Embedding, LayerNorm,
// RMSNorm, Dropout, the GELU MLP and the SwiGLU one, each a plain struct owning its parameters
// with a named visitor.
// Does not hide the tape: a module's call takes Vars and records onto their tape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "../attention/multi_head.hpp"
#include "../autodiff/autodiff.hpp"

namespace attn::nn {

// Every module visits its parameters as f(name, Parameter&), names joined with '.' under a
// prefix ("blocks.0.mlp.fc.weight"), in a fixed order: the order checkpoints and optimizers use.
inline std::string join_name(std::string_view prefix, std::string_view name) {
  std::string s(prefix);
  if (!s.empty()) s += '.';
  s += name;
  return s;
}

// y = x Wᵀ + b with W [out, in] (PyTorch's nn.Linear layout); weights ~ N(0, std²), bias 0.
template <class T = float>
struct Linear : ProjectionWeights<T> {
  Linear() = default;
  Linear(index_t in, index_t out, bool bias, double std, Rng& rng)
      : ProjectionWeights<T>(out, in, bias, std, rng) {}

  index_t in_features() const { return this->weight.value.shape()[1]; }
  index_t out_features() const { return this->weight.value.shape()[0]; }

  Var<T> operator()(const Var<T>& x) {
    ATTN_CHECK(x.shape().last() == in_features(), shape_error, "nn::Linear: input ", x.shape(),
               " does not end in in_features = ", in_features());
    return ProjectionWeights<T>::operator()(x.tape(), x);
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    f(join_name(prefix, "weight"), this->weight);
    if (this->has_bias) f(join_name(prefix, "bias"), this->bias);
  }
};

// A table of V vectors of width D; ids of shape S give S + [D].
template <class T = float>
struct Embedding {
  Parameter<T> weight;  // [V, D]

  Embedding() = default;
  Embedding(index_t vocab, index_t dim, double std, Rng& rng)
      : weight(Tensor<T>::randn({vocab, dim}, rng, 0.0, std)) {}

  Var<T> operator()(Tape<T>& tape, const Tensor<std::int32_t>& ids) {
    return embedding(tape.param(weight), ids);
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    f(join_name(prefix, "weight"), weight);
  }
};

// y = γ ⊙ (x − μ) / √(σ² + ε) + β over the last axis; γ = 1, β = 0 at initialisation.
template <class T = float>
struct LayerNorm {
  Parameter<T> weight;  // γ [D]
  Parameter<T> bias;    // β [D]
  double eps = 1e-5;

  LayerNorm() = default;
  explicit LayerNorm(index_t dim, double eps_ = 1e-5)
      : weight(Tensor<T>::ones({dim})), bias(Tensor<T>::zeros({dim})), eps(eps_) {}

  Var<T> operator()(const Var<T>& x) {
    Tape<T>& tape = x.tape();
    return layer_norm(x, tape.param(weight), tape.param(bias), eps);
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    f(join_name(prefix, "weight"), weight);
    f(join_name(prefix, "bias"), bias);
  }
};

// y = γ ⊙ x / √(mean(x²) + ε) over the last axis (rms_norm: no centring, no bias; Llama's
// normalisation); γ = 1 at initialisation.
template <class T = float>
struct RMSNorm {
  Parameter<T> weight;  // γ [D]
  double eps = 1e-6;

  RMSNorm() = default;
  explicit RMSNorm(index_t dim, double eps_ = 1e-6) : weight(Tensor<T>::ones({dim})), eps(eps_) {}

  Var<T> operator()(const Var<T>& x) { return rms_norm(x, x.tape().param(weight), eps); }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    f(join_name(prefix, "weight"), weight);
  }
};

// The normalisation of a transformer: LayerNorm (GPT-2) or RMSNorm (Llama).
enum class NormKind { layer, rms };

// A LayerNorm or an RMSNorm, chosen at run time (a model's config says which): the same
// parameters, names and results as the module it stands for (weight, and LayerNorm's bias).
template <class T = float>
struct Norm {
  NormKind kind = NormKind::layer;
  Parameter<T> weight;  // γ [D]
  Parameter<T> bias;    // β [D]; LayerNorm's only
  double eps = 1e-5;

  Norm() = default;
  Norm(NormKind kind_, index_t dim, double eps_)
      : kind(kind_),
        weight(Tensor<T>::ones({dim})),
        bias(kind_ == NormKind::layer ? Tensor<T>::zeros({dim}) : Tensor<T>()),
        eps(eps_) {
    ATTN_CHECK(eps > 0, value_error, "nn::Norm: eps must be positive, got ", eps);
  }

  Var<T> operator()(const Var<T>& x) {
    Tape<T>& tape = x.tape();
    if (kind == NormKind::rms) return rms_norm(x, tape.param(weight), eps);
    return layer_norm(x, tape.param(weight), tape.param(bias), eps);
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    f(join_name(prefix, "weight"), weight);
    if (kind == NormKind::layer) f(join_name(prefix, "bias"), bias);
  }
};

// Inverted dropout with its own seeded stream; the identity when not training or p = 0.
struct Dropout {
  double p = 0.0;
  Rng rng{0};

  Dropout() = default;
  Dropout(double p_, std::uint64_t seed) : p(p_), rng(seed) {
    ATTN_CHECK(p >= 0 && p < 1, value_error, "nn::Dropout: p must be in [0, 1), got ", p);
  }

  template <class T>
  Var<T> operator()(const Var<T>& x, bool training) {
    if (!training || p == 0.0 || !x.tape().grad_enabled()) return x;
    return dropout(x, p, rng, true);
  }
};

// GELU, exact: x·Φ(x) (PyTorch's nn.GELU default); or tanh: GPT-2's approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (nn.GELU(approximate="tanh"), "gelu_new").
enum class GeluForm { exact, tanh };

// The transformer's position-wise feed-forward network: proj(GELU(fc(x))), hidden width 4·D.
template <class T = float>
struct MLP {
  Linear<T> fc;    // [4D, D]
  Linear<T> proj;  // [D, 4D]
  GeluForm gelu_form = GeluForm::exact;

  MLP() = default;
  MLP(index_t dim, index_t hidden, bool bias, double std, double proj_std, Rng& rng,
      GeluForm form = GeluForm::exact)
      : fc(dim, hidden, bias, std, rng), proj(hidden, dim, bias, proj_std, rng), gelu_form(form) {}

  Var<T> operator()(const Var<T>& x) {
    const Var<T> h = fc(x);
    return proj(gelu_form == GeluForm::tanh ? Var<T>(gelu_tanh(h)) : Var<T>(gelu(h)));
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    fc.for_each_parameter(f, join_name(prefix, "fc"));
    proj.for_each_parameter(f, join_name(prefix, "proj"));
  }
};

// The gated feed-forward network of Llama-style models ("GLU Variants Improve Transformer",
// Noam Shazeer): down(SiLU(gate(x)) ⊙ up(x)), SiLU(z) = z·σ(z), three bias-free projections.
template <class T = float>
struct SwiGLU {
  Linear<T> gate;  // [hidden, D]
  Linear<T> up;    // [hidden, D]
  Linear<T> down;  // [D, hidden]

  SwiGLU() = default;
  SwiGLU(index_t dim, index_t hidden, double std, double down_std, Rng& rng)
      : gate(dim, hidden, false, std, rng),
        up(dim, hidden, false, std, rng),
        down(hidden, dim, false, down_std, rng) {}

  Var<T> operator()(const Var<T>& x) {
    const Var<T> g = gate(x);
    return down(g * sigmoid(g) * up(x));
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    gate.for_each_parameter(f, join_name(prefix, "gate"));
    up.for_each_parameter(f, join_name(prefix, "up"));
    down.for_each_parameter(f, join_name(prefix, "down"));
  }
};

// The feed-forward network of a transformer block: GPT's GELU MLP (exact or tanh GELU) or
// Llama's SwiGLU, chosen at run time (a model's config says which).
enum class FeedForwardKind { gelu, gelu_tanh, swiglu };

template <class T = float>
struct FeedForward {
  FeedForwardKind kind = FeedForwardKind::gelu;
  MLP<T> mlp;        // gelu and gelu_tanh: fc, proj
  SwiGLU<T> swiglu;  // swiglu: gate, up, down (bias-free)

  FeedForward() = default;
  // Hidden width `hidden`; weights ~ N(0, std²), the projection back to the residual stream
  // N(0, out_std²); `bias` for the MLP's (SwiGLU has none: a value_error when asked for).
  FeedForward(FeedForwardKind kind_, index_t dim, index_t hidden, bool bias, double std,
              double out_std, Rng& rng)
      : kind(kind_) {
    ATTN_CHECK(dim > 0 && hidden > 0, value_error, "nn::FeedForward: widths ", dim, " and ", hidden,
               " must be positive");
    if (kind == FeedForwardKind::swiglu) {
      ATTN_CHECK(!bias, value_error,
                 "nn::FeedForward: the SwiGLU network has no biases; build it without them");
      swiglu = SwiGLU<T>(dim, hidden, std, out_std, rng);
    } else {
      mlp = MLP<T>(dim, hidden, bias, std, out_std, rng,
                   kind == FeedForwardKind::gelu_tanh ? GeluForm::tanh : GeluForm::exact);
    }
  }

  Var<T> operator()(const Var<T>& x) {
    return kind == FeedForwardKind::swiglu ? swiglu(x) : mlp(x);
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    if (kind == FeedForwardKind::swiglu)
      swiglu.for_each_parameter(f, prefix);
    else
      mlp.for_each_parameter(f, prefix);
  }
};

// Number of scalars in a module's parameters.
template <class Module>
index_t parameter_count(Module& m) {
  index_t n = 0;
  m.for_each_parameter([&](const std::string&, auto& p) { n += p.value.numel(); });
  return n;
}

}  // namespace attn::nn
