// attn/optim/sgd.hpp: stochastic gradient descent with optional momentum (heavy ball or Nesterov),
// dampening and L2 weight decay, step for step as torch.optim.SGD.
// Does not do learning-rate schedules (see schedule.hpp), gradient clipping (clip.hpp), maximize
// or sparse gradients.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "param_group.hpp"

namespace attn::optim {

struct SGDConfig {
  double lr = 1e-2;         // γ
  double momentum = 0;      // μ
  double dampening = 0;     // τ
  double weight_decay = 0;  // λ, applied to parameters with decay == true
  bool nesterov = false;
};

// torch.optim.SGD, for a gradient g_t of parameter θ at step t (1-based):
//   g_t ← g_t + λ θ_{t−1}                          (weight decay as L2, where decay == true)
//   if μ ≠ 0:
//     b_t = g_t                    at t = 1        (torch clones the first gradient: no dampening)
//     b_t = μ b_{t−1} + (1 − τ) g_t  for t > 1
//     g_t ← g_t + μ b_t  (Nesterov)  or  g_t ← b_t  (heavy ball)
//   θ_t = θ_{t−1} − γ g_t
// State: momentum_buffer (b) when μ ≠ 0. "t = 1" means step_count() == 0, so a resumed run that
// restores the buffers must restore the step count too.
template <std::floating_point T>
class SGD : public detail::OptimizerBase<T> {
  using Base = detail::OptimizerBase<T>;

 public:
  explicit SGD(std::vector<NamedParameter<T>> params, SGDConfig config = {})
      : Base("SGD", std::move(params), config.lr), config_(config) {
    detail::check_nonnegative("SGD", "momentum", config.momentum);
    detail::check_range("SGD", "dampening", config.dampening, 0.0, false, 1.0, false);
    detail::check_nonnegative("SGD", "weight_decay", config.weight_decay);
    ATTN_CHECK(!config.nesterov || (config.momentum > 0 && config.dampening == 0), value_error,
               "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum ",
               config.momentum, " and dampening ", config.dampening);
    if (config.momentum != 0) momentum_buffer_ = this->zero_state();
  }

  const SGDConfig& config() const { return config_; }

  // One update from the parameters' gradients; then step_count() + 1.
  void step() {
    this->check_gradients();
    const bool momentum = config_.momentum != 0;
    if (momentum) this->check_state("momentum_buffer", momentum_buffer_);
    for (std::size_t i = 0; i < this->params_.size(); ++i) {
      const NamedParameter<T>& p = this->params_[i];
      T* buf = momentum ? momentum_buffer_[i].data() : nullptr;
      const bool decay = p.decay && config_.weight_decay != 0;
      // The flags become template arguments, so each loop the compiler sees is branch-free.
      with_flag(decay, [&](auto d) {
        with_flag(momentum, [&](auto mom) {
          with_flag(this->step_ == 0, [&](auto first) {
            with_flag(config_.nesterov, [&](auto nesterov) {
              update<d(), mom(), first(), nesterov()>(p.param->value.data(), p.param->grad.data(),
                                                      buf, p.param->value.numel());
            });
          });
        });
      });
    }
    ++this->step_;
  }

  // f(std::string name, Tensor<T>& t) for each state tensor: "momentum_buffer.<param>" when
  // momentum != 0, nothing otherwise.
  template <class F>
  void for_each_state(F&& f) {
    this->visit_state("momentum_buffer", momentum_buffer_, f);
  }
  template <class F>
  void for_each_state(F&& f) const {
    this->visit_state("momentum_buffer", momentum_buffer_, f);
  }

 private:
  template <class F>
  static void with_flag(bool flag, F&& f) {
    if (flag)
      f(std::true_type{});
    else
      f(std::false_type{});
  }

  // The update of one parameter, in the order torch.optim.SGD computes it.
  template <bool Decay, bool Momentum, bool First, bool Nesterov>
  void update(T* theta, const T* grad, T* buf, index_t n) const {
    const T lr = static_cast<T>(this->lr_);
    const T wd = static_cast<T>(config_.weight_decay);
    const T mu = static_cast<T>(config_.momentum);
    const T one_minus_tau = static_cast<T>(1.0 - config_.dampening);
    detail::for_each_block(n, 6.0, [&](index_t begin, index_t end) {
      for (index_t j = begin; j < end; ++j) {
        T g = grad[j];
        if constexpr (Decay) g += wd * theta[j];  // g ← g + λθ
        if constexpr (Momentum) {
          if constexpr (First)
            buf[j] = g;  // b₁ = g₁
          else
            buf[j] = mu * buf[j] + one_minus_tau * g;  // b_t = μ b_{t−1} + (1 − τ) g_t
          if constexpr (Nesterov)
            g += mu * buf[j];  // g ← g + μ b_t
          else
            g = buf[j];  // g ← b_t
        }
        theta[j] -= lr * g;  // θ ← θ − γ g
      }
    });
  }

  SGDConfig config_;
  std::vector<Tensor<T>> momentum_buffer_;  // empty when momentum == 0
};

}  // namespace attn::optim
