// tests/dist/shard_fixture.hpp: three parameters of odd sizes (37 elements, so no block count
// divides them evenly) and a synthetic gradient for every shard, drawn from the shard's index with
// magnitudes over six decades so that the order of a sum shows in its bits; and the reference
// left fold over shards as a plain loop. Does not use ShardGradients or MPI: it is their oracle.
#pragma once

#include <algorithm>
#include <attn/autodiff/tape.hpp>
#include <attn/core/rng.hpp>
#include <attn/optim/param_group.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace attn::test {

struct ShardFixture {
  std::vector<Parameter<float>> params;

  ShardFixture() {
    for (const Shape& s : {Shape{7}, Shape{3, 9}, Shape{3}})
      params.emplace_back(Tensor<float>::zeros(s));
  }

  // A module's visitor: f("p<i>", parameter i).
  template <class F>
  void for_each_parameter(F&& f) {
    for (std::size_t i = 0; i < params.size(); ++i) f(name(i), params[i]);
  }

  std::vector<optim::NamedParameter<float>> named() {
    std::vector<optim::NamedParameter<float>> out;
    for (std::size_t i = 0; i < params.size(); ++i) out.push_back({name(i), &params[i], true});
    return out;
  }

  // "p<i>", appended rather than `"p" + std::to_string(i)`, which g++ 12 at -O3 warns about
  // (-Wrestrict, a false positive in its std::string operator+).
  static std::string name(std::size_t i) {
    std::string s = "p";
    s += std::to_string(i);
    return s;
  }

  index_t size() const {
    index_t n = 0;
    for (const auto& p : params) n += p.value.numel();
    return n;
  }

  // Element `flat` of shard s's gradient: ±u·10^e, e in [−3, 3), from Rng(1000 + s).
  static std::vector<float> shard_gradient(index_t s, index_t n) {
    Rng r(1000 + std::uint64_t(s));
    std::vector<float> g(static_cast<std::size_t>(n));
    for (auto& v : g) {
      const double magnitude = std::pow(10.0, r.uniform(-3.0, 3.0));
      v = float((r.uniform() < 0.5 ? -1.0 : 1.0) * magnitude * r.uniform(0.5, 1.0));
    }
    return g;
  }
  float gradient(index_t s, index_t flat) const {
    return shard_gradient(s, size())[static_cast<std::size_t>(flat)];
  }
  static double loss(index_t s) { return 1.0 / double(3 + s); }

  // Puts shard s's gradient into the parameters' gradients (as a backward pass would).
  void set_gradients(index_t s) {
    const std::vector<float> g = shard_gradient(s, size());
    std::size_t at = 0;
    for (auto& p : params)
      for (index_t j = 0; j < p.grad.numel(); ++j) p.grad[j] = g[at++];
  }

  // The parameters' gradients, laid end to end.
  std::vector<float> gradients() const {
    std::vector<float> out;
    for (const auto& p : params) out.insert(out.end(), p.grad.begin(), p.grad.end());
    return out;
  }

  // ((g_first + g_first+1) + …) + g_last−1, element by element, in float.
  std::vector<float> folded(index_t first, index_t last) const {
    std::vector<float> acc = shard_gradient(first, size());
    for (index_t s = first + 1; s < last; ++s) {
      const std::vector<float> g = shard_gradient(s, size());
      for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += g[i];
    }
    return acc;
  }
  // The loss fold (l_0 + l_1) + … over shards [0, shards).
  static double folded_loss(index_t shards) {
    double l = loss(0);
    for (index_t s = 1; s < shards; ++s) l += loss(s);
    return l;
  }
  // How many elements of a and b differ (as floats, so exactly).
  static index_t differences(const std::vector<float>& a, const std::vector<float>& b) {
    index_t n = a.size() == b.size() ? 0 : index_t(std::max(a.size(), b.size()));
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
    return n;
  }
  std::vector<float> folded_in_reverse(index_t shards) const {
    std::vector<float> acc = shard_gradient(shards - 1, size());
    for (index_t s = shards - 2; s >= 0; --s) {
      const std::vector<float> g = shard_gradient(s, size());
      for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += g[i];
    }
    return acc;
  }
};

}  // namespace attn::test
