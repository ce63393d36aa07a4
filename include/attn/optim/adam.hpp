// attn/optim/adam.hpp: Adam (L2 weight decay), AdamW (decoupled weight decay) and RAdam (rectified
// Adam), step for step as torch.optim.Adam, AdamW and RAdam (PyTorch 1.13).
// Does not do AMSGrad, maximize, or per-parameter step counts: one step count for all parameters.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "param_group.hpp"

namespace attn::optim {

struct AdamConfig {
  double lr = 1e-3;         // α
  double beta1 = 0.9;       // β₁
  double beta2 = 0.999;     // β₂
  double eps = 1e-8;        // ε
  double weight_decay = 0;  // λ, applied to parameters with decay == true
};

namespace detail {

// What one moment update does, besides the moments: the scalars of one step, each computed in
// double and rounded once to T (as torch does with Python floats).
template <class T>
struct MomentStep {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  T shrink = T{1};       // AdamW's θ ← (1 − αλ) θ before the update; 1 for Adam and RAdam
  T l2 = T{0};           // Adam's and RAdam's g ← g + λ θ; 0 for AdamW
  T step_size = T{0};    // θ ← θ − step_size · m / denom
  T sqrt_bc2 = T{1};     // denom = √v / sqrt_bc2 + ε
  bool adaptive = true;  // false: denom = 1 (RAdam's un-rectified steps)

  explicit MomentStep(const AdamConfig& c)
      : beta1(static_cast<T>(c.beta1)),
        one_minus_beta1(static_cast<T>(1.0 - c.beta1)),
        beta2(static_cast<T>(c.beta2)),
        one_minus_beta2(static_cast<T>(1.0 - c.beta2)),
        eps(static_cast<T>(c.eps)) {}
};

// The shared inner loop of Adam, AdamW and RAdam over one parameter:
//   θ ← shrink · θ                       (AdamW's decoupled decay)
//   g ← g + l2 · θ                       (Adam's and RAdam's L2 decay)
//   m ← β₁ m + (1 − β₁) g
//   v ← β₂ v + (1 − β₂) g²
//   θ ← θ − step_size · m / (√v / sqrt_bc2 + ε)      or  θ − step_size · m  when !adaptive
// Written as Eigen array expressions over each block because those vectorise the square root;
// a plain loop calling std::sqrt does not (errno semantics keep GCC and Clang scalar). Each line
// is still one elementwise pass, so the result does not depend on the thread count.
template <class T>
void moment_update(T* theta, const T* grad, T* m, T* v, index_t n, const MomentStep<T>& s) {
  for_each_block(n, 12.0, [&](index_t begin, index_t end) {
    const index_t len = end - begin;
    VectorMap<T> th(theta + begin, len), mm(m + begin, len), vv(v + begin, len);
    const ConstVectorMap<T> gr(grad + begin, len);
    if (s.shrink != T{1}) th *= s.shrink;
    auto update = [&](const auto& g) {
      mm = s.beta1 * mm + s.one_minus_beta1 * g;
      vv = s.beta2 * vv + s.one_minus_beta2 * g * g;
      // ε is added to √v̂ = √v / √(1 − β₂ᵗ), as torch does; Adam's paper adds it there too.
      if (s.adaptive)
        th -= s.step_size * (mm / (vv.sqrt() / s.sqrt_bc2 + s.eps));
      else
        th -= s.step_size * mm;
    };
    if (s.l2 != T{0})
      update(gr + s.l2 * th);  // read before th changes: the last line is the only write to θ
    else
      update(gr);
  });
}

// The moments every Adam variant keeps, and its config checks.
template <std::floating_point T>
class AdamFamily : public OptimizerBase<T> {
 public:
  const AdamConfig& config() const { return config_; }

  // f(std::string name, Tensor<T>& t) for "exp_avg.<param>" (m) then "exp_avg_sq.<param>" (v).
  template <class F>
  void for_each_state(F&& f) {
    this->visit_state("exp_avg", exp_avg_, f);
    this->visit_state("exp_avg_sq", exp_avg_sq_, f);
  }
  template <class F>
  void for_each_state(F&& f) const {
    this->visit_state("exp_avg", exp_avg_, f);
    this->visit_state("exp_avg_sq", exp_avg_sq_, f);
  }

 protected:
  AdamFamily(const char* name, std::vector<NamedParameter<T>> params, const AdamConfig& config)
      : OptimizerBase<T>(name, std::move(params), config.lr), config_(config) {
    check_range(name, "beta1", config.beta1, 0.0, false, 1.0, true);
    check_range(name, "beta2", config.beta2, 0.0, false, 1.0, true);
    check_range(name, "eps", config.eps, 0.0, true, std::numeric_limits<double>::infinity(), false);
    check_nonnegative(name, "weight_decay", config.weight_decay);
    exp_avg_ = this->zero_state();
    exp_avg_sq_ = this->zero_state();
  }

  void check_step() const {
    this->check_gradients();
    this->check_state("exp_avg", exp_avg_);
    this->check_state("exp_avg_sq", exp_avg_sq_);
  }

  // Runs moment_update over every parameter; those with decay == true get `shrink` and `l2`,
  // the others 1 and 0. Then step_count() + 1.
  void update_all(MomentStep<T> s, T shrink, T l2) {
    for (std::size_t i = 0; i < this->params_.size(); ++i) {
      const NamedParameter<T>& p = this->params_[i];
      s.shrink = p.decay ? shrink : T{1};
      s.l2 = p.decay ? l2 : T{0};
      moment_update(p.param->value.data(), p.param->grad.data(), exp_avg_[i].data(),
                    exp_avg_sq_[i].data(), p.param->value.numel(), s);
    }
    ++this->step_;
  }

  // Bias corrections of step t = step_count() + 1, in double: 1 − β₁ᵗ and 1 − β₂ᵗ.
  double bias_correction1() const {
    return 1.0 - std::pow(config_.beta1, static_cast<double>(this->step_ + 1));
  }
  double bias_correction2() const {
    return 1.0 - std::pow(config_.beta2, static_cast<double>(this->step_ + 1));
  }

  AdamConfig config_;
  std::vector<Tensor<T>> exp_avg_;     // m
  std::vector<Tensor<T>> exp_avg_sq_;  // v
};

}  // namespace detail

// Adam (Kingma & Ba 2015, Algorithm 1) as torch.optim.Adam, at step t with gradient g_t:
//   g_t ← g_t + λ θ_{t−1}                          (L2 weight decay, where decay == true)
//   m_t = β₁ m_{t−1} + (1 − β₁) g_t
//   v_t = β₂ v_{t−1} + (1 − β₂) g_t²
//   m̂_t = m_t / (1 − β₁ᵗ),  v̂_t = v_t / (1 − β₂ᵗ)
//   θ_t = θ_{t−1} − α m̂_t / (√v̂_t + ε)
// The L2 term goes through the moments, so with Adam it is scaled by 1/√v̂ and barely regularises
// parameters with large gradients; that is why AdamW exists.
template <std::floating_point T>
class Adam : public detail::AdamFamily<T> {
 public:
  explicit Adam(std::vector<NamedParameter<T>> params, AdamConfig config = {})
      : detail::AdamFamily<T>("Adam", std::move(params), config) {}

  // One update from the parameters' gradients; then step_count() + 1.
  void step() {
    this->check_step();
    detail::MomentStep<T> s(this->config_);
    s.step_size = static_cast<T>(this->lr_ / this->bias_correction1());  // α / (1 − β₁ᵗ)
    s.sqrt_bc2 = static_cast<T>(std::sqrt(this->bias_correction2()));    // √(1 − β₂ᵗ)
    this->update_all(s, T{1}, static_cast<T>(this->config_.weight_decay));
  }
};

// AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2) as
// torch.optim.AdamW: the decay acts on the weights directly, outside the moments,
//   θ ← θ (1 − α λ)                                (only where decay == true)
// followed by the Adam update above with λ = 0. As in torch, the decay is scaled by the current
// learning rate α (so a schedule scales it too), not by a separate schedule multiplier.
template <std::floating_point T>
class AdamW : public detail::AdamFamily<T> {
 public:
  // torch.optim.AdamW's defaults: AdamConfig's, with weight_decay = 0.01. An AdamConfig passed
  // explicitly keeps its own weight_decay (0 unless set).
  static constexpr AdamConfig default_config() {
    AdamConfig c;
    c.weight_decay = 0.01;
    return c;
  }

  explicit AdamW(std::vector<NamedParameter<T>> params, AdamConfig config = default_config())
      : detail::AdamFamily<T>("AdamW", std::move(params), config) {}

  // One update from the parameters' gradients; then step_count() + 1.
  void step() {
    this->check_step();
    detail::MomentStep<T> s(this->config_);
    s.step_size = static_cast<T>(this->lr_ / this->bias_correction1());  // α / (1 − β₁ᵗ)
    s.sqrt_bc2 = static_cast<T>(std::sqrt(this->bias_correction2()));    // √(1 − β₂ᵗ)
    this->update_all(s, static_cast<T>(1.0 - this->lr_ * this->config_.weight_decay), T{0});
  }
};

// RAdam (Liu et al. 2020, "On the Variance of the Adaptive Learning Rate and Beyond",
// Algorithm 2) as torch.optim.RAdam (1.13), at step t:
//   g_t ← g_t + λ θ_{t−1}                          (L2 weight decay, where decay == true)
//   m_t = β₁ m_{t−1} + (1 − β₁) g_t,  v_t = β₂ v_{t−1} + (1 − β₂) g_t²,  m̂_t = m_t / (1 − β₁ᵗ)
//   ρ_∞ = 2 / (1 − β₂) − 1,   ρ_t = ρ_∞ − 2 t β₂ᵗ / (1 − β₂ᵗ)   (length of the approximated SMA)
//   if ρ_t > 5:   r_t = √( (ρ_t − 4)(ρ_t − 2) ρ_∞ / ((ρ_∞ − 4)(ρ_∞ − 2) ρ_t) )
//                 θ_t = θ_{t−1} − α r_t m̂_t √(1 − β₂ᵗ) / (√v_t + ε)
//   else:         θ_t = θ_{t−1} − α m̂_t              (SGD with momentum: the variance of the
//                                                      adaptive rate is not yet tractable)
// torch uses the threshold 5 where the paper's Algorithm 2 says 4, and adds ε to √v_t before the
// bias correction; both are kept so results match torch. With β₂ = 0.999 the first 5 steps are
// un-rectified.
template <std::floating_point T>
class RAdam : public detail::AdamFamily<T> {
 public:
  explicit RAdam(std::vector<NamedParameter<T>> params, AdamConfig config = {})
      : detail::AdamFamily<T>("RAdam", std::move(params), config) {}

  // ρ_t for step t (1-based); the update is rectified when it is > 5.
  static double rho(double beta2, std::int64_t t) {
    const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
    const double bt = std::pow(beta2, static_cast<double>(t));
    return rho_inf - 2.0 * static_cast<double>(t) * bt / (1.0 - bt);
  }

  // One update from the parameters' gradients; then step_count() + 1.
  void step() {
    this->check_step();
    const AdamConfig& c = this->config_;
    const double bc1 = this->bias_correction1(), bc2 = this->bias_correction2();
    const double rho_inf = 2.0 / (1.0 - c.beta2) - 1.0;
    const double rho_t = rho(c.beta2, this->step_ + 1);
    const bool rectified = rho_t > 5.0;
    // The whole per-step scalar in double: α r_t √(1 − β₂ᵗ) / (1 − β₁ᵗ), or α / (1 − β₁ᵗ).
    double coef = this->lr_ / bc1;
    if (rectified) {
      const double r = std::sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf /
                                 ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t));
      coef *= r * std::sqrt(bc2);
    }
    detail::MomentStep<T> s(c);
    s.step_size = static_cast<T>(coef);
    s.adaptive = rectified;  // denom = √v / 1 + ε = √v + ε: torch adds ε before the correction
    this->update_all(s, T{1}, static_cast<T>(c.weight_decay));
  }
};

}  // namespace attn::optim
