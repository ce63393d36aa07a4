// attn/io/checkpoint.hpp: a model's parameters, an optimizer's state and a GPT configuration in a
// safetensors file, by name: what a trainer saves to resume exactly, and what PyTorch can load.
// Does not choose file names or decide when to save (the trainer does); writes go through
// save_safetensors, so they are atomic.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <string_view>
#include <system_error>

#include "../nn/transformer.hpp"
#include "safetensors.hpp"

namespace attn::io {

// Stores every parameter of `module` as prefix + name (F32 for float models, F64 for double).
template <class Module>
void put_parameters(Safetensors& file, Module& module, std::string_view prefix = "") {
  module.for_each_parameter(
      [&](const std::string& name, auto& p) { file.put(std::string(prefix) + name, p.value); });
}

// Fills every parameter of `module` from prefix + name. Each must be present with the parameter's
// dtype and exact shape, and finite (a NaN is an io_error naming the tensor), and no other tensor
// under `prefix` may be left over (a checkpoint of a different architecture fails here, naming
// the first tensor that does not fit).
template <class Module>
void get_parameters(const Safetensors& file, Module& module, std::string_view source,
                    std::string_view prefix = "") {
  std::set<std::string> used;
  module.for_each_parameter([&](const std::string& name, auto& p) {
    using T = typename std::remove_cvref_t<decltype(p.value)>::value_type;
    const std::string key = std::string(prefix) + name;
    ATTN_CHECK(file.contains(key), io_error, source, ": the checkpoint has no tensor '", key,
               "' (a model of another architecture?)");
    p.value = file.template get<T>(key, p.value.shape());
    // A NaN or infinite weight would train into a NaN loss and be blamed on the learning rate.
    const auto bad =
        std::find_if(p.value.begin(), p.value.end(), [](T v) { return !std::isfinite(v); });
    ATTN_CHECK(bad == p.value.end(), io_error, source, ": tensor '", key, "' holds ", *bad,
               " at element ", bad - p.value.begin(), ": the checkpoint's weights are not finite");
    p.grad = Tensor<T>::zeros(p.value.shape());
    used.insert(key);
  });
  for (const auto& [key, data] : file.tensors)
    if (key.starts_with(prefix) && !used.contains(key) &&
        (prefix.size() > 0 || !key.starts_with("optim.")))
      throw io_error(std::string(source) + ": unexpected tensor '" + key +
                     "' (not a parameter of this model)");
}

// Stores the optimizer's state tensors as "optim.<state name>" and its step count in metadata.
template <class Optimizer>
void put_optimizer_state(Safetensors& file, Optimizer& optimizer) {
  optimizer.for_each_state([&](const std::string& name, auto& t) { file.put("optim." + name, t); });
  file.metadata["optim.step_count"] = std::to_string(optimizer.step_count());
}

namespace detail {
// All of metadata[key] as an Int, or io_error naming the file and the key ("... is not <what>").
template <class Int>
Int metadata_integer(const Safetensors& file, const std::string& key, std::string_view source,
                     const char* what) {
  const auto it = file.metadata.find(key);
  ATTN_CHECK(it != file.metadata.end(), io_error, source, ": metadata '", key, "' is missing");
  Int v = 0;
  const std::string& s = it->second;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  ATTN_CHECK(ec == std::errc{} && end == s.data() + s.size(), io_error, source, ": metadata '", key,
             "' = '", s, "' is not ", what);
  return v;
}
}  // namespace detail

// Parses all of metadata[key] as an integer, or throws io_error naming the file and the key.
inline std::int64_t metadata_int(const Safetensors& file, const std::string& key,
                                 std::string_view source) {
  return detail::metadata_integer<std::int64_t>(file, key, source, "an integer");
}

// Parses all of metadata[key] as an unsigned 64-bit integer (a seed), or throws io_error naming
// the file and the key ("-1", "abc" and "" are not; std::stoull would take "-1" as 2^64 - 1 and
// throw a bare std::invalid_argument for "abc").
inline std::uint64_t metadata_uint(const Safetensors& file, const std::string& key,
                                   std::string_view source) {
  return detail::metadata_integer<std::uint64_t>(file, key, source, "an unsigned integer");
}

inline double metadata_double(const Safetensors& file, const std::string& key,
                              std::string_view source) {
  const auto it = file.metadata.find(key);
  ATTN_CHECK(it != file.metadata.end(), io_error, source, ": metadata '", key, "' is missing");
  const std::string& s = it->second;
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ATTN_CHECK(used == s.size() && !s.empty(), io_error, source, ": metadata '", key, "' = '", s,
             "' is not a number");
  return v;
}

inline const std::string& metadata_string(const Safetensors& file, const std::string& key,
                                          std::string_view source) {
  const auto it = file.metadata.find(key);
  ATTN_CHECK(it != file.metadata.end(), io_error, source, ": metadata '", key, "' is missing");
  return it->second;
}

template <class Optimizer>
void get_optimizer_state(const Safetensors& file, Optimizer& optimizer, std::string_view source) {
  optimizer.for_each_state([&](const std::string& name, auto& t) {
    using T = typename std::remove_cvref_t<decltype(t)>::value_type;
    const std::string key = "optim." + name;
    ATTN_CHECK(file.contains(key), io_error, source, ": the checkpoint has no optimizer state '",
               key, "'");
    t = file.template get<T>(key, t.shape());
  });
  const std::int64_t steps = metadata_int(file, "optim.step_count", source);
  ATTN_CHECK(steps >= 0, io_error, source, ": optim.step_count = ", steps, " is negative");
  optimizer.set_step_count(steps);
}

// The GPT configuration as metadata "config.<field>" (text, so the file documents itself).
inline void put_gpt_config(Safetensors& file, const nn::GPTConfig& c) {
  auto& m = file.metadata;
  m["config.vocab_size"] = std::to_string(c.vocab_size);
  m["config.block_size"] = std::to_string(c.block_size);
  m["config.layers"] = std::to_string(c.layers);
  m["config.heads"] = std::to_string(c.heads);
  m["config.d_model"] = std::to_string(c.d_model);
  m["config.kv_heads"] = std::to_string(c.kv_heads);
  const auto exact = [](double v) {  // %.17g round-trips every double exactly
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", v);
    return std::string(text);
  };
  m["config.dropout"] = exact(c.dropout);
  m["config.bias"] = c.bias ? "1" : "0";
  m["config.pre_ln"] = c.pre_ln ? "1" : "0";
  m["config.tie_weights"] = c.tie_weights ? "1" : "0";
  m["config.positions"] = std::to_string(static_cast<int>(c.positions));
  m["config.init"] = std::to_string(static_cast<int>(c.init));
  m["config.seed"] = std::to_string(c.seed);
  m["config.norm"] = std::to_string(static_cast<int>(c.norm));
  m["config.norm_eps"] = exact(c.norm_eps);
  m["config.feed_forward"] = std::to_string(static_cast<int>(c.feed_forward));
  m["config.hidden"] = std::to_string(c.hidden);
}

inline nn::GPTConfig get_gpt_config(const Safetensors& file, std::string_view source) {
  nn::GPTConfig c;
  auto flag = [&](const std::string& key) {
    const std::int64_t v = metadata_int(file, key, source);
    ATTN_CHECK(v == 0 || v == 1, io_error, source, ": metadata '", key, "' must be 0 or 1");
    return v == 1;
  };
  auto count = [&](const std::string& key, std::int64_t lo, std::int64_t hi) {
    const std::int64_t v = metadata_int(file, key, source);
    ATTN_CHECK(v >= lo && v <= hi, io_error, source, ": metadata '", key, "' = ", v,
               " is outside [", lo, ", ", hi, "]");
    return v;
  };
  // Bounds far above any model this library trains, checked before anything is allocated: a
  // damaged or hostile file cannot ask for a table of 2^31 x 2^31 weights.
  c.vocab_size = count("config.vocab_size", 1, std::int64_t{1} << 24);
  c.block_size = count("config.block_size", 1, std::int64_t{1} << 20);
  c.layers = count("config.layers", 1, 4096);
  c.d_model = count("config.d_model", 1, std::int64_t{1} << 16);
  c.heads = count("config.heads", 1, c.d_model);
  c.kv_heads = count("config.kv_heads", 0, c.heads);
  // The blocks' norms and feed-forward networks: a checkpoint from before they could be chosen
  // holds GPT-2's (LayerNorm, exact GELU MLP of 4·d_model).
  if (file.metadata.count("config.norm") > 0) {
    c.norm = static_cast<nn::NormKind>(count("config.norm", 0, 1));
    c.norm_eps = metadata_double(file, "config.norm_eps", source);
    ATTN_CHECK(c.norm_eps > 0 && c.norm_eps < 1, io_error, source,
               ": metadata 'config.norm_eps' = ", c.norm_eps, " is outside (0, 1)");
    c.feed_forward = static_cast<nn::FeedForwardKind>(count("config.feed_forward", 0, 2));
    c.hidden = count("config.hidden", 0, std::int64_t{1} << 20);
  }
  const double d = double(c.d_model), hidden = c.hidden > 0 ? double(c.hidden) : 4 * d;
  const double weights = double(c.layers) * (4 * d * d + 3 * d * hidden + 13 * d) +
                         (2 * double(c.vocab_size) + double(c.block_size)) * d;
  ATTN_CHECK(weights <= 0x1p36 && double(c.vocab_size) * d <= 0x1p32, io_error, source,
             ": its config describes a model of about ", weights,
             " weights (config.vocab_size x config.d_model = ", double(c.vocab_size) * d,
             "), more than 2^36 in all or 2^32 in one table");
  c.dropout = metadata_double(file, "config.dropout", source);
  ATTN_CHECK(c.dropout >= 0 && c.dropout < 1, io_error, source,
             ": metadata 'config.dropout' = ", c.dropout, " is outside [0, 1)");
  c.bias = flag("config.bias");
  c.pre_ln = flag("config.pre_ln");
  c.tie_weights = flag("config.tie_weights");
  const std::int64_t pos = count("config.positions", 0, 2), init = count("config.init", 0, 2);
  c.positions = static_cast<nn::PositionEncoding>(pos);
  c.init = static_cast<nn::InitScheme>(init);
  c.seed = metadata_uint(file, "config.seed", source);
  return c;
}

}  // namespace attn::io
