// attn/optim/param_group.hpp: named parameters for the optimizers, the weight-decay rule,
// collecting a module's parameters, and what every optimizer shares (lr, step count, checks,
// blocked loops). Does not hold per-group hyper-parameters: one optimizer has one lr; a parameter
// only chooses whether weight decay applies to it (nanoGPT's two groups are the `decay` flag).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../autodiff/tape.hpp"
#include "../core/error.hpp"
#include "../core/parallel.hpp"
#include "../core/tensor.hpp"

namespace attn::optim {

// One trainable tensor as an optimizer sees it: a name (for state names, checkpoints and error
// messages), the Parameter (not owned: it must outlive the optimizer), and whether weight decay
// applies to it.
template <std::floating_point T>
struct NamedParameter {
  std::string name;
  Parameter<T>* param = nullptr;
  bool decay = true;
};

// nanoGPT's rule (model.py, configure_optimizers): weight decay on every tensor of rank >= 2
// (matrices of linear layers, embeddings), none on rank-1 tensors (biases, LayerNorm gains and
// shifts), whose decay would only pull them towards 0 without regularising any product. The name
// is not consulted; it is there for rules that want it.
template <std::floating_point T>
bool default_decay(const std::string& name, const Parameter<T>& p) {
  (void)name;
  return p.value.rank() >= 2;
}

// minGPT's rule as the problem set's trainer (2020) applies it: weight decay on every parameter
// whose name does not contain "bias". That trainer also exempts names containing
// "LayerNorm.weight", which none of its modules' names (ln1, ln2, ln_f) do, so its LayerNorm
// gains decay, unlike default_decay's.
template <std::floating_point T>
bool mingpt_decay(const std::string& name, const Parameter<T>& p) {
  (void)p;
  return name.find("bias") == std::string::npos;
}

namespace detail {

// Stands in for the callable a module's for_each_parameter receives, to state the concept.
template <class T>
struct ParameterSink {
  template <class Name>
  void operator()(Name&&, Parameter<T>&) const {}
};

}  // namespace detail

// A module: anything whose for_each_parameter(f) calls f(name, Parameter<T>&) for each of its
// parameters, with a name convertible to std::string ("blocks.0.attn.q_proj.weight").
template <class M, class T>
concept ParameterModule = requires(M& m, detail::ParameterSink<T>& f) {
  m.for_each_parameter(f);
};

// The parameters of `m` in the order its for_each_parameter visits them, with decay set by
// default_decay. Change `decay` on the result for other rules.
template <std::floating_point T, class Module>
requires ParameterModule<Module, T> std::vector<NamedParameter<T>> parameters_of(Module& m) {
  std::vector<NamedParameter<T>> out;
  m.for_each_parameter([&](auto&& name, Parameter<T>& p) {
    std::string n(name);
    const bool decay = default_decay<T>(n, p);
    out.push_back(NamedParameter<T>{std::move(n), &p, decay});
  });
  return out;
}

namespace detail {

// Elementwise updates and reductions run over blocks of this many elements. The boundaries depend
// only on the tensor size, so a reduction that sums blocks in order gives the same result for any
// thread count (an elementwise update does anyway).
inline constexpr index_t optim_block = index_t{1} << 14;

// Calls f(begin, end) for consecutive blocks covering [0, n), in parallel when there are several.
// `flops_per_element` is a rough cost for parallel_for's is-it-worth-it test.
template <class F>
void for_each_block(index_t n, double flops_per_element, F&& f) {
  const index_t blocks = block_count(n, optim_block);
  parallel_for(blocks, flops_per_element * static_cast<double>(optim_block), [&](index_t b) {
    const index_t begin = b * optim_block;
    f(begin, std::min(n, begin + optim_block));
  });
}

// value_error unless v is finite and lo <= v (lo_open: lo < v) and v <= hi (hi_open: v < hi).
inline void check_range(const char* who, const char* field, double v, double lo, bool lo_open,
                        double hi, bool hi_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (ok) return;
  std::string range;
  if (std::isinf(hi)) {
    range = attn::detail::message("a finite number ", lo_open ? "> " : ">= ", lo);
  } else {
    range = attn::detail::message("in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]");
  }
  throw value_error(attn::detail::message(who, ": ", field, " must be ", range, ", got ", v));
}

inline void check_nonnegative(const char* who, const char* field, double v) {
  check_range(who, field, v, 0.0, false, std::numeric_limits<double>::infinity(), false);
}

// What every optimizer shares: the parameters (checked once here), the learning rate, the step
// count, zero_grad. Each optimizer derives from it and adds step() and its state.
template <std::floating_point T>
class OptimizerBase {
 public:
  double lr() const { return lr_; }

  // The schedule calls this before each step.
  void set_lr(double lr) {
    check_nonnegative(name_, "lr", lr);
    lr_ = lr;
  }

  // Steps taken so far (t - 1 while step t runs). Restore it with the state tensors to resume: the
  // bias corrections 1 - beta^t and SGD's first-step momentum depend on it.
  std::int64_t step_count() const { return step_; }
  void set_step_count(std::int64_t n) {
    ATTN_CHECK(n >= 0, value_error, name_, "::set_step_count: the step count must be >= 0, got ",
               n);
    step_ = n;
  }

  // Zeroes every parameter's gradient (backward() accumulates into it).
  void zero_grad() {
    for (auto& p : params_) p.param->grad.zero();
  }

  const std::vector<NamedParameter<T>>& parameters() const { return params_; }

 protected:
  OptimizerBase(const char* name, std::vector<NamedParameter<T>> params, double lr)
      : name_(name), params_(std::move(params)) {
    set_lr(lr);
    ATTN_CHECK(!params_.empty(), value_error, name_, ": no parameters to optimize");
    std::map<std::string, std::size_t> by_name;
    std::map<const Parameter<T>*, std::size_t> by_pointer;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const NamedParameter<T>& p = params_[i];
      ATTN_CHECK(!p.name.empty(), value_error, name_, ": parameter ", i, " has an empty name");
      ATTN_CHECK(p.param != nullptr, value_error, name_, ": parameter '", p.name,
                 "' is a null pointer");
      const auto [it, fresh] = by_name.emplace(p.name, i);
      ATTN_CHECK(fresh, value_error, name_, ": parameter name '", p.name,
                 "' is used twice (parameters ", it->second, " and ", i, ")");
      const auto [jt, fresh_pointer] = by_pointer.emplace(p.param, i);
      ATTN_CHECK(fresh_pointer, value_error, name_, ": parameters '", params_[jt->second].name,
                 "' and '", p.name, "' are the same Parameter (it would be updated twice)");
    }
    check_gradients();
  }

  // Every gradient has its value's shape (checked at construction and at each step: a module may
  // have been resized in between).
  void check_gradients() const {
    for (const auto& p : params_)
      ATTN_CHECK(p.param->grad.shape() == p.param->value.shape(), shape_error, name_,
                 ": the gradient of '", p.name, "' has shape ", p.param->grad.shape(),
                 ", its value has shape ", p.param->value.shape());
  }

  // A state tensor for each parameter: zero, the parameter's shape.
  std::vector<Tensor<T>> zero_state() const {
    std::vector<Tensor<T>> s;
    s.reserve(params_.size());
    for (const auto& p : params_) s.push_back(Tensor<T>::zeros(p.param->value.shape()));
    return s;
  }

  // A loader may have replaced a state tensor through for_each_state: it must still fit.
  void check_state(const char* kind, const std::vector<Tensor<T>>& state) const {
    for (std::size_t i = 0; i < params_.size(); ++i)
      ATTN_CHECK(state[i].shape() == params_[i].param->value.shape(), shape_error, name_,
                 ": state tensor '", kind, ".", params_[i].name, "' has shape ", state[i].shape(),
                 ", the parameter has shape ", params_[i].param->value.shape());
  }

  // Calls f("<kind>.<param name>", tensor) for each state tensor of one kind.
  template <class State, class F>
  void visit_state(const char* kind, State& state, F& f) const {
    if (state.empty()) return;  // a kind this configuration does not use (SGD without momentum)
    for (std::size_t i = 0; i < params_.size(); ++i)
      f(std::string(kind) + "." + params_[i].name, state[i]);
  }

  const char* name_;
  std::vector<NamedParameter<T>> params_;
  double lr_ = 0.0;
  std::int64_t step_ = 0;
};

}  // namespace detail
}  // namespace attn::optim
