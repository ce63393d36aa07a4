// attn/nn/any_attention.hpp: AnyAttention<T, Mask>, an attention module whose policies are chosen
// at run time: it holds any module with the same value and mask types behind one virtual call per
// forward, so a program that offers several variants (a trainer's --attention) compiles the model,
// the training loop and the checkpoint code once, and only the attention modules once per variant.
// Does not erase the types of masks or values; a module's own extras (materialized(), the
// cross-attention call) stay on the concrete type.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../attention/multi_head.hpp"
#include "../autodiff/autodiff.hpp"

namespace attn::nn {

// The projection through which module `a` writes into the residual stream.
template <class A>
auto output_projection(A& a) -> decltype((a.out_proj)) {
  return a.out_proj;
}

// What TransformerBlock needs from its attention module (MultiHeadAttention<…> satisfies it, and
// so does AnyAttention): self-attention x [B, T, D] -> [B, T, D] under a mask; incremental
// decoding with a key/value cache; a training flag; a parameter visitor; out_proj, the projection
// that writes into the residual stream (GPT-2 scales its initial weights).
template <class A>
concept AttentionModule = requires(A a, const Var<typename A::value_type>& x,
                                   const typename A::mask_type& mask,
                                   KVCache<typename A::value_type>& cache) {
  { a(x, mask) } -> std::same_as<Var<typename A::value_type>>;
  { a.decode(x, cache, mask) } -> std::same_as<Var<typename A::value_type>>;
  a.training = true;
  a.reseed(std::uint64_t{0});
  a.for_each_parameter([](const std::string&, Parameter<typename A::value_type>&) {});
  { output_projection(a) } -> std::same_as<ProjectionWeights<typename A::value_type>&>;
};

template <class T, class Mask>
class AnyAttention {
 public:
  using value_type = T;
  using mask_type = Mask;

  // Takes over `module` (a MultiHeadAttention<…, Mask, …, T>, LinformerAttention, or any module of
  // the same value and mask types).
  template <class A>
  requires(!std::same_as<std::remove_cvref_t<A>, AnyAttention> &&
           AttentionModule<std::remove_cvref_t<A>> &&
           std::same_as<typename std::remove_cvref_t<A>::value_type, T> &&
           std::same_as<typename std::remove_cvref_t<A>::mask_type,
                        Mask>) explicit AnyAttention(A&& module)
      : self_(std::make_unique<Held<std::remove_cvref_t<A>>>(std::forward<A>(module))) {}

  // A factory for GPT's and TransformerBlock's constructors: an A built from each block's config.
  template <class A>
  static AnyAttention make(const MultiHeadConfig& c) {
    return AnyAttention(A(c));
  }

  bool training = true;  // passed to the held module at every call

  Var<T> operator()(const Var<T>& x, const Mask& mask = {}) {
    self_->set_training(training);
    return self_->attend(x, mask);
  }
  Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask = {}) {
    self_->set_training(training);
    return self_->decode(x, cache, mask);
  }
  void reseed(std::uint64_t seed) { self_->reseed(seed); }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    self_->visit(std::function<void(const std::string&, Parameter<T>&)>(std::ref(f)), prefix);
  }

  friend ProjectionWeights<T>& output_projection(AnyAttention& a) { return a.self_->out(); }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual void set_training(bool on) = 0;
    virtual Var<T> attend(const Var<T>& x, const Mask& mask) = 0;
    virtual Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask) = 0;
    virtual void reseed(std::uint64_t seed) = 0;
    virtual void visit(const std::function<void(const std::string&, Parameter<T>&)>& f,
                       std::string_view prefix) = 0;
    virtual ProjectionWeights<T>& out() = 0;
  };

  template <class A>
  struct Held final : Interface {
    explicit Held(A m) : module(std::move(m)) {}
    void set_training(bool on) override { module.training = on; }
    Var<T> attend(const Var<T>& x, const Mask& mask) override { return module(x, mask); }
    Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask) override {
      return module.decode(x, cache, mask);
    }
    void reseed(std::uint64_t seed) override { module.reseed(seed); }
    void visit(const std::function<void(const std::string&, Parameter<T>&)>& f,
               std::string_view prefix) override {
      module.for_each_parameter(f, prefix);
    }
    ProjectionWeights<T>& out() override { return output_projection(module); }
    A module;
  };

  std::unique_ptr<Interface> self_;
};

}  // namespace attn::nn
