// attn/io/hf.hpp: the Hugging Face model format, both ways, for GPT-2 (GPT2LMHeadModel) and Llama
// (LlamaForCausalLM): a directory with config.json and the weights in model.safetensors, or in
// shards listed by model.safetensors.index.json. load_model reads one into an attn GPT (the names
// mapped, GPT-2's Conv1D weights transposed and its fused c_attn split into the query, key and
// value projections, float16 / bfloat16 / float64 weights converted); save_model writes an attn
// GPT of either architecture so that transformers' from_pretrained(directory) loads it with no
// code of ours. A config field attn does not implement (a dynamic rope_scaling, attention biases
// in a Llama, another activation) is an io_error naming the field and its value: never a silent
// wrong model. The tokenizer files beside a model: io/hf_tokenizer.hpp (write) and
// io/bpe_files.hpp (read).
// Does not download anything nor load other model types.
#pragma once

#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "../attention/multi_head.hpp"
#include "../core/error.hpp"
#include "../nn/any_attention.hpp"
#include "../nn/transformer.hpp"
#include "atomic_file.hpp"
#include "safetensors.hpp"

namespace attn::io::hf {

enum class Architecture { gpt2, llama };

// What a config.json describes, as attn builds it.
struct Config {
  Architecture architecture = Architecture::gpt2;
  nn::GPTConfig model;            // vocabulary, context, layers, heads, width, norms, biases, head
  double rope_theta = 10000;      // Llama's rotary base
  RotaryScaling rope_scaling;     // Llama's rope_scaling: none, linear, yarn or llama3
  std::string dtype = "float32";  // how the weights are stored: float32, float16 or bfloat16
};

// The model type load_model builds: a GPT whose attention is chosen at run time (GPT-2's scaled
// dot product, or Llama's rotary positions in the half-split layout) under Mask: mask::Causal, or
// mask::And<Causal, LeftPadding> for left-padded batches (nn::generate_batch).
template <class T, class Mask = mask::Causal>
using Model = nn::GPT<nn::AnyAttention<T, Mask>>;

namespace detail {

using json = nlohmann::json;

inline json read_json(const std::filesystem::path& path) {
  const std::vector<std::byte> bytes = read_file(path, std::size_t{1} << 26);  // 64 MiB
  try {
    return json::parse(reinterpret_cast<const char*>(bytes.data()),
                       reinterpret_cast<const char*>(bytes.data()) + bytes.size());
  } catch (const json::exception& e) {
    throw io_error(attn::detail::message(path.string(), ": not valid JSON (", e.what(), ")"));
  }
}

// The config.json of `source`, field by field: a missing field takes `fallback`; a field of the
// wrong kind or outside its range is an io_error naming the file, the field and its value.
class Fields {
 public:
  Fields(json j, std::string source) : j_(std::move(j)), source_(std::move(source)) {
    ATTN_CHECK(j_.is_object(), io_error, source_, ": not a JSON object");
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  std::string text(const std::string& key) const { return has(key) ? j_.at(key).dump() : "null"; }

  std::int64_t integer(const std::string& key, std::optional<std::int64_t> fallback,
                       std::int64_t lo, std::int64_t hi) const {
    if (!has(key)) {
      ATTN_CHECK(fallback.has_value(), io_error, source_, ": field '", key, "' is missing");
      return *fallback;
    }
    const json& v = j_.at(key);
    ATTN_CHECK(v.is_number_integer(), io_error, source_, ": field '", key, "' = ", v.dump(),
               " is not an integer");
    const std::int64_t n = v.get<std::int64_t>();
    ATTN_CHECK(n >= lo && n <= hi, io_error, source_, ": field '", key, "' = ", n, " is outside [",
               lo, ", ", hi, "]");
    return n;
  }
  double number(const std::string& key, double fallback, double lo, double hi) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    ATTN_CHECK(v.is_number(), io_error, source_, ": field '", key, "' = ", v.dump(),
               " is not a number");
    const double x = v.get<double>();
    ATTN_CHECK(x >= lo && x <= hi, io_error, source_, ": field '", key, "' = ", x, " is outside [",
               lo, ", ", hi, "]");
    return x;
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    ATTN_CHECK(v.is_boolean(), io_error, source_, ": field '", key, "' = ", v.dump(),
               " is not true or false");
    return v.get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    ATTN_CHECK(v.is_string(), io_error, source_, ": field '", key, "' = ", v.dump(),
               " is not a string");
    return v.get<std::string>();
  }
  // The object `key` (absent or null: nullopt), as Fields of its own.
  std::optional<Fields> object(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    ATTN_CHECK(j_.at(key).is_object(), io_error, source_, ": field '", key,
               "' = ", j_.at(key).dump(), " is not an object");
    return Fields(j_.at(key), source_ + " (" + key + ")");
  }
  // A field attn does not implement must be absent, null or `expected`.
  void require(const std::string& key, const json& expected, const std::string& why) const {
    ATTN_CHECK(!has(key) || j_.at(key) == expected, io_error, source_, ": field '", key,
               "' = ", j_.at(key).dump(), " is not supported (", why, ")");
  }

 private:
  json j_;
  std::string source_;
};

// A stored tensor as float values (F32, F64, F16 and BF16 converted), `what` naming it.
template <class T>
std::vector<T> values_of(const TensorData& d, const std::string& what) {
  std::size_t n = 1;
  for (const std::int64_t s : d.shape) n *= static_cast<std::size_t>(s);
  std::vector<T> out(n);
  const auto word = [&](std::size_t i, std::size_t size) {
    std::uint64_t w = 0;
    for (std::size_t b = 0; b < size; ++b)
      w |= std::uint64_t(std::to_integer<unsigned>(d.bytes[i * size + b])) << (8 * b);
    return w;
  };
  const auto half = [](std::uint32_t h) {  // IEEE binary16 -> binary32, exactly
    const std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: mant * 2^-24
      const float v = std::ldexp(float(mant), -24);
      return sign ? -v : v;
    }
    const std::uint32_t bits =
        exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
    return std::bit_cast<float>(bits);
  };
  if (d.dtype == "F32") {
    for (std::size_t i = 0; i < n; ++i) out[i] = T(std::bit_cast<float>(std::uint32_t(word(i, 4))));
  } else if (d.dtype == "F64") {
    for (std::size_t i = 0; i < n; ++i) out[i] = T(std::bit_cast<double>(word(i, 8)));
  } else if (d.dtype == "BF16") {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = T(std::bit_cast<float>(std::uint32_t(word(i, 2)) << 16));
  } else if (d.dtype == "F16") {
    for (std::size_t i = 0; i < n; ++i) out[i] = T(half(std::uint32_t(word(i, 2))));
  } else {
    throw io_error(attn::detail::message(what, " has dtype ", d.dtype,
                                         "; a model's weights are F32, F16, BF16 or F64"));
  }
  return out;
}

// The weights of a model directory: model.safetensors, or the shards its index lists (each a
// plain file name in the directory), merged. A tensor listed in the index must be in its shard.
inline std::map<std::string, std::pair<TensorData, std::string>> read_weights(
    const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, std::pair<TensorData, std::string>> all;
  const auto add = [&](const fs::path& file) {
    Safetensors s = load_safetensors(file);
    for (auto& [name, data] : s.tensors)
      all.insert_or_assign(name, std::pair{std::move(data), file.string()});
  };
  std::error_code ec;
  if (fs::exists(dir / "model.safetensors", ec)) {
    add(dir / "model.safetensors");
    return all;
  }
  const fs::path index = dir / "model.safetensors.index.json";
  ATTN_CHECK(fs::exists(index, ec), io_error, dir.string(),
             ": neither model.safetensors nor model.safetensors.index.json is there");
  const json j = read_json(index);
  ATTN_CHECK(j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object(), io_error,
             index.string(), ": no 'weight_map' object");
  std::map<std::string, std::string> where;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    ATTN_CHECK(file.is_string(), io_error, index.string(), ": the shard of '", name,
               "' is not a file name");
    const std::string f = file.get<std::string>();
    ATTN_CHECK(!f.empty() && f.find('/') == std::string::npos &&
                   f.find('\\') == std::string::npos && f != "." && f != "..",
               io_error, index.string(), ": shard '", f, "' of '", name,
               "' is not a file name in the model's directory");
    where[name] = f;
  }
  std::set<std::string> shards;
  for (const auto& [name, f] : where) shards.insert(f);
  for (const std::string& f : shards) add(dir / f);
  for (const auto& [name, f] : where)
    ATTN_CHECK(all.count(name) && all.at(name).second == (dir / f).string(), io_error,
               index.string(), ": tensor '", name, "' is not in its shard ", f);
  return all;
}

}  // namespace detail

// Reads `dir`/config.json. GPT-2: model_type "gpt2" (n_layer, n_head, n_embd, n_positions,
// vocab_size, layer_norm_epsilon, n_inner, activation_function gelu_new / gelu_pytorch_tanh /
// gelu, tie_word_embeddings). Llama: model_type "llama" (num_hidden_layers, num_attention_heads,
// num_key_value_heads, hidden_size, intermediate_size, max_position_embeddings, vocab_size,
// rms_norm_eps, rope_theta, rope_scaling linear / yarn / llama3, head_dim = hidden_size / heads,
// tie_word_embeddings). What attn does not implement is refused by name: another rope_scaling
// (dynamic), attention_bias, mlp_bias, a sliding window, another hidden_act, GPT-2's attention
// scaling options and cross-attention.
inline Config read_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  const detail::Fields f(detail::read_json(path), path.string());
  Config c;
  nn::GPTConfig& m = c.model;
  const std::string type = f.string("model_type", "");
  m.dropout = 0;
  m.pre_ln = true;
  if (type == "gpt2") {
    c.architecture = Architecture::gpt2;
    m.layers = f.integer("n_layer", std::nullopt, 1, 4096);
    m.d_model = f.integer("n_embd", std::nullopt, 1, 1 << 16);
    m.heads = f.integer("n_head", std::nullopt, 1, m.d_model);
    m.block_size = f.integer("n_positions", 1024, 1, 1 << 20);
    m.vocab_size = f.integer("vocab_size", std::nullopt, 1, 1 << 24);
    m.hidden = f.integer("n_inner", 0, 1, 1 << 20);
    m.norm = nn::NormKind::layer;
    m.norm_eps = f.number("layer_norm_epsilon", 1e-5, 1e-30, 1);
    const std::string act = f.string("activation_function", "gelu_new");
    ATTN_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu", io_error,
               path.string(), ": field 'activation_function' = \"", act,
               "\" is not supported (gelu_new, gelu_pytorch_tanh or gelu)");
    m.feed_forward = act == "gelu" ? nn::FeedForwardKind::gelu : nn::FeedForwardKind::gelu_tanh;
    m.bias = true;
    m.tie_weights = f.flag("tie_word_embeddings", true);
    m.positions = nn::PositionEncoding::learned;
    f.require("scale_attn_weights", true, "attn divides scores by sqrt(head width)");
    f.require("scale_attn_by_inverse_layer_idx", false, "scores are not scaled by layer");
    f.require("add_cross_attention", false, "a GPT has no cross-attention");
  } else if (type == "llama") {
    c.architecture = Architecture::llama;
    m.layers = f.integer("num_hidden_layers", std::nullopt, 1, 4096);
    m.d_model = f.integer("hidden_size", std::nullopt, 1, 1 << 16);
    m.heads = f.integer("num_attention_heads", std::nullopt, 1, m.d_model);
    m.kv_heads = f.integer("num_key_value_heads", m.heads, 1, m.heads);
    ATTN_CHECK(m.heads % m.kv_heads == 0, io_error, path.string(), ": num_attention_heads (",
               m.heads, ") is not a multiple of num_key_value_heads (", m.kv_heads, ")");
    ATTN_CHECK(m.d_model % m.heads == 0 && (m.d_model / m.heads) % 2 == 0, io_error, path.string(),
               ": hidden_size ", m.d_model, " is not an even head width times ", m.heads, " heads");
    f.integer("head_dim", m.d_model / m.heads, m.d_model / m.heads, m.d_model / m.heads);
    m.block_size = f.integer("max_position_embeddings", 2048, 1, 1 << 24);
    m.vocab_size = f.integer("vocab_size", std::nullopt, 1, 1 << 24);
    m.hidden = f.integer("intermediate_size", std::nullopt, 1, 1 << 20);
    m.norm = nn::NormKind::rms;
    m.norm_eps = f.number("rms_norm_eps", 1e-6, 1e-30, 1);
    m.feed_forward = nn::FeedForwardKind::swiglu;
    m.bias = false;
    m.tie_weights = f.flag("tie_word_embeddings", false);
    m.positions = nn::PositionEncoding::none;
    c.rope_theta = f.number("rope_theta", 10000.0, 1e-30, 1e30);
    f.require("hidden_act", "silu", "the SwiGLU network uses SiLU");
    f.require("attention_bias", false, "attn's Llama projections have no bias");
    f.require("mlp_bias", false, "attn's SwiGLU has no bias");
    if (const std::optional<detail::Fields> r = f.object("rope_scaling")) {
      // transformers writes rope_type (older files: type).
      const std::string kind = r->string("rope_type", r->string("type", ""));
      RotaryScaling& s = c.rope_scaling;
      using K = RotaryScaling::Kind;
      ATTN_CHECK(kind == "linear" || kind == "yarn" || kind == "llama3" || kind == "default",
                 io_error, path.string(), ": field 'rope_scaling' = ", f.text("rope_scaling"),
                 " is not supported (linear, yarn or llama3; a scaling that changes with the "
                 "sequence, such as dynamic, is not)");
      s.kind = kind == "linear"   ? K::linear
               : kind == "yarn"   ? K::yarn
               : kind == "llama3" ? K::llama3
                                  : K::none;
      if (s.kind != K::none) {
        ATTN_CHECK(r->has("factor"), io_error, path.string(),
                   ": field 'rope_scaling' = ", f.text("rope_scaling"), " has no factor");
        s.factor = r->number("factor", 1, 1, 1e6);
      }
      if (s.kind == K::yarn || s.kind == K::llama3)
        s.original_context =
            r->integer("original_max_position_embeddings",
                       s.kind == K::yarn ? std::optional<std::int64_t>(m.block_size) : std::nullopt,
                       1, 1 << 24);
      if (s.kind == K::yarn) {
        s.beta_fast = r->number("beta_fast", 32, 1e-6, 1e6);
        s.beta_slow = r->number("beta_slow", 1, 1e-6, 1e6);
        s.truncate = r->flag("truncate", true);
        s.attention_factor = r->number("attention_factor", 0, 1e-6, 1e6);
        r->require("mscale", detail::json(), "give attention_factor instead");
        r->require("mscale_all_dim", detail::json(), "give attention_factor instead");
      }
      if (s.kind == K::llama3) {
        s.low_freq_factor = r->number("low_freq_factor", 1, 1e-6, 1e6);
        s.high_freq_factor = r->number("high_freq_factor", 4, 1e-6, 1e6);
      }
      try {
        (void)rotary_frequencies(m.d_model / m.heads, c.rope_theta, s);  // its own checks
      } catch (const value_error& e) {
        throw io_error(path.string() + ": field 'rope_scaling': " + e.what());
      }
    }
    ATTN_CHECK(!f.has("sliding_window"), io_error, path.string(),
               ": field 'sliding_window' = ", f.text("sliding_window"),
               " is not supported (Llama attends to every position)");
  } else {
    throw io_error(attn::detail::message(path.string(),
                                         ": field 'model_type' = ", f.text("model_type"),
                                         " is not supported (gpt2 or llama)"));
  }
  // Newer transformers write "dtype", older ones "torch_dtype".
  c.dtype = f.string("dtype", f.string("torch_dtype", "float32"));
  ATTN_CHECK(c.dtype == "float32" || c.dtype == "float16" || c.dtype == "bfloat16", io_error,
             path.string(), ": dtype \"", c.dtype, "\" is not float32, float16 or bfloat16");
  return c;
}

// An attn model of `c`'s architecture, its weights drawn from `seed` (load_model replaces them).
template <class T, class Mask = mask::Causal>
Model<T, Mask> make_model(const Config& c) {
  using Any = nn::AnyAttention<T, Mask>;
  if (c.architecture == Architecture::gpt2)
    return Model<T, Mask>(c.model, [](const MultiHeadConfig& mc) {
      return Any(MultiHeadAttention<score::ScaledDot, kernel::Softmax, Mask, Heads<dynamic>,
                                    projection::Separate, T>(mc));
    });
  return Model<T, Mask>(
      c.model, [theta = c.rope_theta, scaling = c.rope_scaling](const MultiHeadConfig& mc) {
        MultiHeadAttention<score::Rotary, kernel::Softmax, Mask, Heads<dynamic>,
                           projection::Separate, T>
            a(mc);
        a.score.base = theta;
        a.score.pairs = RotaryPairs::halves;
        a.score.scaling = scaling;
        return Any(std::move(a));
      });
}

namespace detail {

// How one attn parameter is stored in the Hugging Face file: its tensor's name, and for GPT-2's
// Conv1D layers (weights [in, out]) that it is transposed; for c_attn, which third of the fused
// query/key/value projection it is (0, 1, 2; -1: not fused).
struct Stored {
  std::string name;
  bool transposed = false;
  int third = -1;
};

// The Hugging Face name of attn parameter `name` ("blocks.3.attn.q_proj.weight") of a model of
// architecture `a`.
inline Stored stored_as(Architecture a, const std::string& name) {
  std::string rest = name;
  std::string block;
  if (name.starts_with("blocks.")) {
    const std::size_t dot = name.find('.', 7);
    block = name.substr(7, dot - 7);
    rest = name.substr(dot + 1);
  }
  static const std::map<std::string, std::string> gpt2{
      {"tok_emb.weight", "transformer.wte.weight"},
      {"pos_emb.weight", "transformer.wpe.weight"},
      {"ln_f.weight", "transformer.ln_f.weight"},
      {"ln_f.bias", "transformer.ln_f.bias"},
      {"head.weight", "lm_head.weight"},
      {"ln1.weight", "ln_1.weight"},
      {"ln1.bias", "ln_1.bias"},
      {"ln2.weight", "ln_2.weight"},
      {"ln2.bias", "ln_2.bias"},
      {"attn.out_proj.weight", "attn.c_proj.weight"},
      {"attn.out_proj.bias", "attn.c_proj.bias"},
      {"mlp.fc.weight", "mlp.c_fc.weight"},
      {"mlp.fc.bias", "mlp.c_fc.bias"},
      {"mlp.proj.weight", "mlp.c_proj.weight"},
      {"mlp.proj.bias", "mlp.c_proj.bias"}};
  static const std::map<std::string, std::string> llama{
      {"tok_emb.weight", "model.embed_tokens.weight"},
      {"ln_f.weight", "model.norm.weight"},
      {"head.weight", "lm_head.weight"},
      {"ln1.weight", "input_layernorm.weight"},
      {"ln2.weight", "post_attention_layernorm.weight"},
      {"attn.q_proj.weight", "self_attn.q_proj.weight"},
      {"attn.k_proj.weight", "self_attn.k_proj.weight"},
      {"attn.v_proj.weight", "self_attn.v_proj.weight"},
      {"attn.out_proj.weight", "self_attn.o_proj.weight"},
      {"mlp.gate.weight", "mlp.gate_proj.weight"},
      {"mlp.up.weight", "mlp.up_proj.weight"},
      {"mlp.down.weight", "mlp.down_proj.weight"}};
  Stored s;
  if (a == Architecture::gpt2 && !block.empty() && rest.starts_with("attn.") &&
      (rest.find("q_proj") != std::string::npos || rest.find("k_proj") != std::string::npos ||
       rest.find("v_proj") != std::string::npos)) {
    s.third = rest[5] == 'q' ? 0 : rest[5] == 'k' ? 1 : 2;
    s.name = "attn.c_attn." + rest.substr(rest.rfind('.') + 1);
    s.transposed = rest.ends_with(".weight");
  } else {
    const auto& table = a == Architecture::gpt2 ? gpt2 : llama;
    const auto it = table.find(rest);
    ATTN_CHECK(it != table.end(), value_error, "hf: attn parameter '", name,
               "' has no place in the ", a == Architecture::gpt2 ? "GPT-2" : "Llama", " format");
    s.name = it->second;
    s.transposed = a == Architecture::gpt2 && !block.empty() && rest.ends_with(".weight") &&
                   !rest.starts_with("ln");
  }
  if (!block.empty())
    s.name = (a == Architecture::gpt2 ? "transformer.h." : "model.layers.") + block + "." + s.name;
  return s;
}

// Where element (r, k) of an attn parameter of shape `shape` ([out, in] = [rows, cols], or a
// vector [cols], r = 0) lies in its stored tensor (s): transposed to [in, out] for a Conv1D, and
// for c_attn one third of [in, 3·out] (or of [3·cols]); stored_shape is that tensor's shape.
inline std::size_t stored_index(const Stored& s, const Shape& shape, index_t r, index_t k) {
  const index_t rows = shape.rank() == 2 ? shape[0] : 1,
                cols = shape.rank() == 2 ? shape[1] : shape[0];
  const index_t third = s.third >= 0 ? s.third : 0, parts = s.third >= 0 ? 3 : 1;
  if (shape.rank() == 1) return std::size_t(third * cols + k);
  if (s.transposed) return std::size_t(k * parts * rows + third * rows + r);
  return std::size_t(r * cols + k);
}
inline std::vector<std::int64_t> stored_shape(const Stored& s, const Shape& shape) {
  std::vector<std::int64_t> d(shape.dims().begin(), shape.dims().end());
  if (s.third >= 0) d[0] *= 3;  // c_attn holds q, k, v side by side
  if (s.transposed) std::swap(d[0], d[1]);
  return d;
}

}  // namespace detail

// Reads the weights of the model directory `dir` (of config `c`, read_config) into `model`
// (make_model<T>(c)): every parameter must be there with its shape (an io_error naming the file,
// the tensor and both shapes), finite, and nothing else may be there but the buffers transformers
// leaves in older files (attention masks, rotary frequencies) and a tied head's copy.
template <class T, class Mask>
void load_weights(const std::filesystem::path& dir, const Config& c, Model<T, Mask>& model) {
  auto stored = detail::read_weights(dir);
  std::set<std::string> used;
  // GPT-2's fused c_attn tensors, converted once for their three parts and dropped after the third.
  std::map<std::string, std::pair<std::vector<T>, int>> fused;
  model.for_each_parameter([&](const std::string& name, Parameter<T>& p) {
    const detail::Stored s = detail::stored_as(c.architecture, name);
    const auto it = stored.find(s.name);
    ATTN_CHECK(it != stored.end(), io_error, dir.string(), ": the weights have no tensor '", s.name,
               "' (attn's ", name, ")");
    const TensorData& d = it->second.first;
    const std::string what = it->second.second + ": tensor '" + s.name + "'";
    const Shape& want = p.value.shape();  // [out, in] or [n]
    const std::vector<std::int64_t> expected = detail::stored_shape(s, want);
    ATTN_CHECK(d.shape == expected, io_error, what, " has shape ", io::detail::shape_text(d.shape),
               ", expected ", io::detail::shape_text(expected));
    std::vector<T> own;
    const std::vector<T>* v = &own;
    auto part = fused.end();
    if (s.third >= 0) {
      bool fresh = false;
      std::tie(part, fresh) = fused.try_emplace(s.name);
      if (fresh) part->second.first = detail::values_of<T>(d, what);
      v = &part->second.first;
    } else {
      own = detail::values_of<T>(d, what);
    }
    const index_t rows = want.rank() == 2 ? want[0] : 1,
                  cols = want.rank() == 2 ? want[1] : want[0];
    Tensor<T> t(want);
    for (index_t r = 0; r < rows; ++r)
      for (index_t k = 0; k < cols; ++k)
        t[r * cols + k] = (*v)[detail::stored_index(s, want, r, k)];
    if (part != fused.end() && ++part->second.second == 3) fused.erase(part);
    for (index_t i = 0; i < t.numel(); ++i)
      ATTN_CHECK(std::isfinite(double(t[i])), io_error, what, " holds ", t[i], " at element ", i,
                 ": the weights are not finite");
    p.value = std::move(t);
    p.grad = Tensor<T>::zeros(want);
    used.insert(s.name);
  });
  for (const auto& [name, data] : stored) {
    if (used.count(name)) continue;
    const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
                        name.ends_with("rotary_emb.inv_freq");
    const bool tied_head = name == "lm_head.weight" && c.model.tie_weights;
    ATTN_CHECK(buffer || tied_head, io_error, data.second, ": unexpected tensor '", name,
               "' (not a weight of this ", c.architecture == Architecture::gpt2 ? "GPT-2" : "Llama",
               " model)");
  }
}

// The model in `dir` (config.json and its weights), as attn computes it in T.
template <class T, class Mask = mask::Causal>
Model<T, Mask> load_model(const std::filesystem::path& dir, Config* config = nullptr) {
  const Config c = read_config(dir);
  Model<T, Mask> model = make_model<T, Mask>(c);
  load_weights(dir, c, model);
  model.set_training(false);
  if (config != nullptr) *config = c;
  return model;
}

// The Config of an attn GPT `m` as architecture `a` (rope_theta for Llama), or a value_error
// naming the first setting the format cannot express.
inline Config config_of(const nn::GPTConfig& m, Architecture a, double rope_theta = 10000) {
  const auto need = [&](bool ok, const char* what) {
    ATTN_CHECK(ok, value_error, "hf::config_of: a ", a == Architecture::gpt2 ? "GPT-2" : "Llama",
               " model needs ", what);
  };
  need(m.pre_ln, "pre-norm blocks (pre_ln)");
  need(m.init != nn::InitScheme::scaled_embedding,
       "unscaled embeddings (InitScheme::normal or mingpt)");
  if (a == Architecture::gpt2) {
    need(m.norm == nn::NormKind::layer, "LayerNorm");
    need(m.feed_forward != nn::FeedForwardKind::swiglu, "a GELU MLP");
    need(m.bias, "biases");
    need(m.positions == nn::PositionEncoding::learned, "learned positions");
    need(m.kv_heads == 0 || m.kv_heads == m.heads, "one key/value head per head");
  } else {
    need(m.norm == nn::NormKind::rms, "RMSNorm");
    need(m.feed_forward == nn::FeedForwardKind::swiglu, "the SwiGLU network");
    need(m.hidden > 0, "an explicit hidden width (intermediate_size)");
    need(!m.bias, "no biases");
    need(m.positions == nn::PositionEncoding::none, "no added positions (rotary ones)");
  }
  Config c;
  c.architecture = a;
  c.model = m;
  c.rope_theta = rope_theta;
  return c;
}

// Writes `model` (of config `c`) into `dir` as transformers saves that architecture:
// config.json and model.safetensors (float32, metadata format "pt"), each atomically. The
// attention must be GPT-2's (scaled dot product) or Llama's (rotary, half-split layout, base
// c.rope_theta): the format says nothing else, and config_of checks the rest.
template <class T, class Mask>
void save_model(const std::filesystem::path& dir, const Config& c, Model<T, Mask>& model) {
  const nn::GPTConfig& m = c.model;
  (void)config_of(m, c.architecture, c.rope_theta);
  std::filesystem::create_directories(dir);
  Safetensors file;
  file.metadata["format"] = "pt";
  std::map<std::string, std::vector<float>> fused;  // c_attn weight / bias per block
  model.for_each_parameter([&](const std::string& name, Parameter<T>& p) {
    const detail::Stored s = detail::stored_as(c.architecture, name);
    const Shape& shape = p.value.shape();
    const index_t rows = shape.rank() == 2 ? shape[0] : 1,
                  cols = shape.rank() == 2 ? shape[1] : shape[0];
    const std::vector<std::int64_t> dims = detail::stored_shape(s, shape);
    Tensor<float> stored(Shape(std::span<const index_t>(dims.data(), dims.size())));
    const auto fill = [&](float* out) {
      for (index_t r = 0; r < rows; ++r)
        for (index_t k = 0; k < cols; ++k)
          out[detail::stored_index(s, shape, r, k)] = float(p.value[r * cols + k]);
    };
    if (s.third < 0) {
      fill(stored.data());
      file.put(s.name, stored);
      return;
    }
    // c_attn: q, k and v fill thirds of one buffer, written when the last (v) is in place.
    std::vector<float>& f = fused[s.name];
    f.resize(std::size_t(stored.numel()));
    fill(f.data());
    if (s.third == 2) {
      std::copy(f.begin(), f.end(), stored.data());
      file.put(s.name, stored);
    }
  });
  nlohmann::ordered_json j;
  if (c.architecture == Architecture::gpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = m.vocab_size;
    j["n_positions"] = m.block_size;
    j["n_embd"] = m.d_model;
    j["n_layer"] = m.layers;
    j["n_head"] = m.heads;
    j["n_inner"] = m.hidden > 0 ? nlohmann::ordered_json(m.hidden) : nlohmann::ordered_json();
    j["activation_function"] = m.feed_forward == nn::FeedForwardKind::gelu ? "gelu" : "gelu_new";
    j["layer_norm_epsilon"] = m.norm_eps;
    j["resid_pdrop"] = j["embd_pdrop"] = j["attn_pdrop"] = 0.0;
    j["tie_word_embeddings"] = m.tie_weights;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = m.vocab_size;
    j["max_position_embeddings"] = m.block_size;
    j["hidden_size"] = m.d_model;
    j["intermediate_size"] = m.hidden;
    j["num_hidden_layers"] = m.layers;
    j["num_attention_heads"] = m.heads;
    j["num_key_value_heads"] = m.kv_heads > 0 ? m.kv_heads : m.heads;
    j["head_dim"] = m.d_model / m.heads;
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = m.norm_eps;
    j["rope_theta"] = c.rope_theta;
    const RotaryScaling& s = c.rope_scaling;
    using K = RotaryScaling::Kind;
    ATTN_CHECK(s.kind != K::ntk, value_error,
               "hf::save_model: the NTK-aware rotary scaling has no rope_scaling of transformers");
    if (s.kind == K::none) {
      j["rope_scaling"] = nullptr;
    } else {
      nlohmann::ordered_json r;
      r["rope_type"] = s.kind == K::linear ? "linear" : s.kind == K::yarn ? "yarn" : "llama3";
      r["factor"] = s.factor;
      if (s.kind != K::linear) r["original_max_position_embeddings"] = s.original_context;
      if (s.kind == K::yarn) {
        r["beta_fast"] = s.beta_fast;
        r["beta_slow"] = s.beta_slow;
        r["truncate"] = s.truncate;
        if (s.attention_factor > 0) r["attention_factor"] = s.attention_factor;
      }
      if (s.kind == K::llama3) {
        r["low_freq_factor"] = s.low_freq_factor;
        r["high_freq_factor"] = s.high_freq_factor;
      }
      j["rope_scaling"] = r;
    }
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["tie_word_embeddings"] = m.tie_weights;
  }
  j["torch_dtype"] = "float32";
  save_safetensors(dir / "model.safetensors", file);
  write_file_atomically(dir / "config.json", j.dump(2) + "\n");
}

}  // namespace attn::io::hf
