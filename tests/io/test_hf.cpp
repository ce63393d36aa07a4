// Tests of attn/io/hf.hpp against transformers (tests/io/hf_reference.py wrote the models and
// their outputs under tests/io/data/hf/): a GPT-2 and a Llama model load and give transformers'
// logits and greedy continuations (with and without the key/value cache), a bfloat16 model in
// shards converts on load, a model saved by attn loads back with the same bits, and hostile files
// (a tensor missing or of another shape, a cut file, a config that lies, a field attn does not
// implement, a shard outside the directory) each give one io_error naming what is wrong.
#include <doctest/doctest.h>
#include <attn/io/hf.hpp>
#include <attn/nn/generate.hpp>

#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "../test_files.hpp"
#include "../test_util.hpp"
#include "../torch_reference_file.hpp"

// A named namespace: the io tests are one unity build.
namespace hf_test {

namespace fs = std::filesystem;
namespace hf = attn::io::hf;
using attn::index_t;
using attn::Tensor;
using attn::test::message_of;

const fs::path data = fs::path(ATTN_TESTS_SOURCE_DIR) / "io" / "data" / "hf";

const torch_reference::ReferenceFile& reference() {
  static const torch_reference::ReferenceFile file =
      torch_reference::load_reference((data / "reference.txt").string(), "attn-hf-reference 1",
                                      "build/oracle-venv/bin/python tests/io/hf_reference.py");
  return file;
}

Tensor<std::int32_t> ids_of(const Tensor<double>& t) {
  Tensor<std::int32_t> ids(t.shape());
  for (index_t i = 0; i < t.numel(); ++i) ids[i] = std::int32_t(t[i]);
  return ids;
}

Tensor<double> logits_of(hf::Model<float>& model, const Tensor<std::int32_t>& ids) {
  attn::Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  const Tensor<float> l = model(tape, ids).value();
  Tensor<double> out(l.shape());
  for (index_t i = 0; i < l.numel(); ++i) out[i] = double(l[i]);
  return out;
}

// Logits within 1e-4 of transformers' (both in float32), and the greedy continuation token for
// token, with the cache and without.
void check_against_reference(hf::Model<float>& model, const std::string& name) {
  const auto& ref = reference();
  const Tensor<double>& expected = torch_reference::tensor(ref, name + ".logits");
  const Tensor<double> got = logits_of(model, ids_of(torch_reference::tensor(ref, name + ".ids")));
  double scale = 0;
  for (index_t i = 0; i < expected.numel(); ++i) scale = std::max(scale, std::abs(expected[i]));
  CHECK(scale > 1);  // the logits are not all near 0: a wrong weight shows
  torch_reference::check_close(name + " logits", got, expected, 1e-4 * scale);
  const Tensor<double>& prompt = torch_reference::tensor(ref, name + ".prompt");
  const Tensor<double>& greedy = torch_reference::tensor(ref, name + ".greedy");
  std::vector<std::int32_t> p;
  for (index_t i = 0; i < prompt.numel(); ++i) p.push_back(std::int32_t(prompt[i]));
  for (const bool cache : {true, false}) {
    CAPTURE(cache);
    attn::nn::SampleConfig s;
    s.max_tokens = greedy.numel();
    s.temperature = 0;
    s.use_cache = cache;
    const std::vector<std::int32_t> out = attn::nn::generate(model, p, s);
    REQUIRE(index_t(out.size()) == greedy.numel());
    for (index_t i = 0; i < greedy.numel(); ++i)
      CHECK(out[std::size_t(i)] == std::int32_t(greedy[i]));
  }
}

using attn::test::read_text;
using attn::test::write_text;

fs::path scratch(const std::string& name) {
  return attn::test::fresh_dir("attn_hf_", name);
}

// A copy of the reference model `name` in a scratch directory.
fs::path copy_of(const std::string& name, const std::string& as) {
  const fs::path d = scratch(as);
  for (const auto& e : fs::directory_iterator(data / name))
    fs::copy_file(e.path(), d / e.path().filename());
  return d;
}

// Replaces `from` by `to` in dir/config.json (which must hold `from`).
void edit_config(const fs::path& dir, const std::string& from, const std::string& to) {
  std::string c = read_text(dir / "config.json");
  const std::size_t at = c.find(from);
  REQUIRE(at != std::string::npos);
  write_text(dir / "config.json", c.replace(at, from.size(), to));
}

TEST_CASE("hf: a GPT-2 model gives transformers' logits and greedy tokens") {
  hf::Config c;
  hf::Model<float> model = hf::load_model<float>(data / "gpt2", &c);
  CHECK(c.architecture == hf::Architecture::gpt2);
  CHECK(c.model.tie_weights);
  CHECK(c.model.feed_forward == attn::nn::FeedForwardKind::gelu_tanh);
  CHECK(c.model.block_size == 64);
  check_against_reference(model, "gpt2");
}

TEST_CASE("hf: a Llama model (grouped-query heads, rotary halves) gives transformers' outputs") {
  hf::Config c;
  hf::Model<float> model = hf::load_model<float>(data / "llama", &c);
  CHECK(c.architecture == hf::Architecture::llama);
  CHECK(c.model.kv_heads == 2);
  CHECK(c.rope_theta == 500000.0);
  check_against_reference(model, "llama");
}

TEST_CASE("hf: bfloat16 weights in shards are widened exactly on load") {
  hf::Config c;
  hf::Model<float> model = hf::load_model<float>(data / "llama_bf16", &c);
  CHECK(c.dtype == "bfloat16");
  check_against_reference(model, "llama_bf16");
}

TEST_CASE("hf: left-padded batches continue as transformers' batched greedy generation") {
  using Padded = attn::mask::And<attn::mask::Causal, attn::mask::LeftPadding>;
  for (const char* name : {"gpt2", "llama"}) {
    CAPTURE(name);
    hf::Model<float, Padded> model = hf::load_model<float, Padded>(data / name);
    hf::Model<float> alone = hf::load_model<float>(data / name);
    const Tensor<double>& batch =
        torch_reference::tensor(reference(), std::string(name) + ".batch");
    const Tensor<double>& expected =
        torch_reference::tensor(reference(), std::string(name) + ".batch_greedy");
    const index_t B = batch.shape()[0], L = batch.shape()[1];
    std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(B));
    for (index_t b = 0; b < B; ++b)
      for (index_t i = 0; i < L; ++i)
        if (batch[b * L + i] >= 0)
          prompts[std::size_t(b)].push_back(std::int32_t(batch[b * L + i]));
    attn::nn::SampleConfig s;
    s.max_tokens = expected.shape()[1];
    s.temperature = 0;
    const auto rows = attn::nn::generate_batch(model, prompts, s);
    REQUIRE(index_t(rows.size()) == B);
    for (index_t b = 0; b < B; ++b) {
      CAPTURE(b);
      REQUIRE(index_t(rows[std::size_t(b)].size()) == expected.shape()[1]);
      for (index_t i = 0; i < expected.shape()[1]; ++i)
        CHECK(rows[std::size_t(b)][std::size_t(i)] ==
              std::int32_t(expected[b * expected.shape()[1] + i]));
      // Each row continues as its prompt does alone.
      CHECK(attn::nn::generate(alone, prompts[std::size_t(b)], s) == rows[std::size_t(b)]);
    }
    // The padded forward pass: each row's real positions have the logits of the row alone.
    std::vector<index_t> starts;
    Tensor<std::int32_t> ids(attn::Shape{B, L}, std::int32_t{0});
    for (index_t b = 0; b < B; ++b) {
      starts.push_back(L - index_t(prompts[std::size_t(b)].size()));
      for (std::size_t i = 0; i < prompts[std::size_t(b)].size(); ++i)
        ids[b * L + starts.back() + index_t(i)] = prompts[std::size_t(b)][i];
    }
    attn::Tape<float> tape;
    const Tensor<float> padded =
        model(tape, ids, Padded{attn::mask::Causal{}, attn::mask::LeftPadding(starts)}).value();
    const index_t V = padded.shape()[2];
    for (index_t b = 0; b < B; ++b) {
      const index_t n = index_t(prompts[std::size_t(b)].size());
      Tensor<std::int32_t> one(attn::Shape{1, n});
      std::copy(prompts[std::size_t(b)].begin(), prompts[std::size_t(b)].end(), one.begin());
      const Tensor<float> single = alone(tape, one).value();
      double worst = 0;
      for (index_t i = 0; i < n * V; ++i)
        worst = std::max(
            worst, double(std::abs(single[i] - padded[(b * L + starts[std::size_t(b)]) * V + i])));
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("hf: Llama's rope_scaling (linear, yarn, llama3) is read, used and written back") {
  const fs::path dir = copy_of("llama", "rope");
  edit_config(dir, "\"rope_scaling\": null",
              "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
              "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
              "\"original_max_position_embeddings\": 16}");
  hf::Config c;
  hf::Model<float> scaled = hf::load_model<float>(dir, &c);
  CHECK(c.rope_scaling.kind == attn::RotaryScaling::Kind::llama3);
  CHECK(c.rope_scaling.factor == 8.0);
  CHECK(c.rope_scaling.original_context == 16);
  // The scaling reaches the attention: the logits move away from the unscaled model's.
  hf::Model<float> plain = hf::load_model<float>(data / "llama");
  const Tensor<std::int32_t> ids = ids_of(torch_reference::tensor(reference(), "llama.ids"));
  const Tensor<double> a = logits_of(scaled, ids), b = logits_of(plain, ids);
  double moved = 0;
  for (index_t i = 0; i < a.numel(); ++i) moved = std::max(moved, std::abs(a[i] - b[i]));
  CHECK(moved > 0.01);
  const fs::path out = scratch("rope_out");
  hf::save_model(out, c, scaled);
  hf::Config back;
  (void)hf::load_model<float>(out, &back);
  CHECK(back.rope_scaling.kind == attn::RotaryScaling::Kind::llama3);
  CHECK(back.rope_scaling.high_freq_factor == 4.0);
  CHECK(back.rope_scaling.original_context == 16);
  fs::remove_all(dir);
  fs::remove_all(out);
}

TEST_CASE("hf: a model attn saves loads back with the same bits, in either architecture") {
  for (const char* name : {"gpt2", "llama"}) {
    CAPTURE(name);
    hf::Config c;
    hf::Model<float> model = hf::load_model<float>(data / name, &c);
    const fs::path dir = scratch(std::string("save_") + name);
    hf::save_model(dir, c, model);
    hf::Config back_config;
    hf::Model<float> back = hf::load_model<float>(dir, &back_config);
    CHECK(back_config.model.layers == c.model.layers);
    CHECK(back_config.model.hidden == c.model.hidden);
    CHECK(back_config.rope_theta == c.rope_theta);
    const Tensor<std::int32_t> ids = ids_of(torch_reference::tensor(reference(), "gpt2.ids"));
    const Tensor<double> a = logits_of(model, ids), b = logits_of(back, ids);
    for (index_t i = 0; i < a.numel(); ++i) REQUIRE(a[i] == b[i]);
    // The fused c_attn and the transposed Conv1D weights are written as transformers stores them.
    if (std::string(name) == "gpt2")
      CHECK(attn::io::load_safetensors(dir / "model.safetensors")
                .get<float>("transformer.h.0.attn.c_attn.weight")
                .shape() == attn::Shape{60, 180});
    fs::remove_all(dir);
  }
  // A model the format cannot express is refused by what it lacks.
  attn::nn::GPTConfig post_ln = hf::read_config(data / "gpt2").model;
  post_ln.pre_ln = false;
  CHECK(message_of([&] { hf::config_of(post_ln, hf::Architecture::gpt2); }) ==
        "hf::config_of: a GPT-2 model needs pre-norm blocks (pre_ln)");
  CHECK(message_of([&] {
          hf::config_of(hf::read_config(data / "gpt2").model, hf::Architecture::llama);
        }) == "hf::config_of: a Llama model needs RMSNorm");
}

TEST_CASE("hf: hostile files give one io_error naming the problem") {
  const auto refused = [](const fs::path& dir) {
    return message_of<attn::io_error>([&] { hf::load_model<float>(dir); });
  };
  SUBCASE("a tensor missing, one of another shape, an unknown one") {
    const fs::path dir = copy_of("gpt2", "missing");
    attn::io::Safetensors s = attn::io::load_safetensors(dir / "model.safetensors");
    s.tensors.erase("transformer.h.1.mlp.c_fc.bias");
    attn::io::save_safetensors(dir / "model.safetensors", s);
    CHECK(refused(dir) == dir.string() +
                              ": the weights have no tensor 'transformer.h.1.mlp.c_fc.bias' "
                              "(attn's blocks.1.mlp.fc.bias)");
    s = attn::io::load_safetensors(data / "gpt2" / "model.safetensors");
    s.put("transformer.h.0.attn.c_proj.weight", Tensor<float>::zeros({60, 61}));
    attn::io::save_safetensors(dir / "model.safetensors", s);
    CHECK(refused(dir).find("tensor 'transformer.h.0.attn.c_proj.weight' has shape [60, 61], "
                            "expected [60, 60]") != std::string::npos);
    s = attn::io::load_safetensors(data / "gpt2" / "model.safetensors");
    s.put("transformer.h.0.attn.extra", Tensor<float>::zeros({2}));
    attn::io::save_safetensors(dir / "model.safetensors", s);
    CHECK(refused(dir).find("unexpected tensor 'transformer.h.0.attn.extra' (not a weight of this "
                            "GPT-2 model)") != std::string::npos);
    s = attn::io::load_safetensors(data / "gpt2" / "model.safetensors");
    Tensor<float> w = s.get<float>("transformer.wte.weight");
    w[7] = std::nanf("");
    s.put("transformer.wte.weight", w);
    attn::io::save_safetensors(dir / "model.safetensors", s);
    CHECK(refused(dir).find("tensor 'transformer.wte.weight' holds nan at element 7") !=
          std::string::npos);
    fs::remove_all(dir);
  }
  SUBCASE("a file cut short") {
    const fs::path dir = copy_of("llama", "cut");
    const std::string bytes = read_text(dir / "model.safetensors");
    write_text(dir / "model.safetensors", bytes.substr(0, bytes.size() / 2));
    CHECK(refused(dir).find("model.safetensors") != std::string::npos);
    fs::remove_all(dir);
  }
  SUBCASE("a config that lies about the sizes") {
    const fs::path dir = copy_of("llama", "lies");
    edit_config(dir, "\"intermediate_size\": 136", "\"intermediate_size\": 128");
    CHECK(refused(dir).find("tensor 'model.layers.0.mlp.gate_proj.weight' has shape [136, 60], "
                            "expected [128, 60]") != std::string::npos);
    fs::remove_all(dir);
  }
  SUBCASE("fields attn does not implement") {
    struct Case {
      const char *model, *from, *to, *says;
    };
    for (const Case& k :
         {Case{"llama", "\"rope_scaling\": null",
               "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}",
               "field 'rope_scaling' = {\"factor\":2.0,\"rope_type\":\"dynamic\"} is not "
               "supported (linear, yarn or llama3"},
          Case{"llama", "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\"}",
               "field 'rope_scaling' = {\"rope_type\":\"yarn\"} has no factor"},
          Case{"llama", "\"rope_scaling\": null",
               "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}",
               "field 'original_max_position_embeddings' is missing"},
          Case{"llama", "\"rope_scaling\": null",
               "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0.5}",
               "field 'factor' = 0.5 is outside [1, "},
          Case{"llama", "\"attention_bias\": false", "\"attention_bias\": true",
               "field 'attention_bias' = true is not supported"},
          Case{"llama", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
               "field 'hidden_act' = \"gelu\" is not supported"},
          Case{"llama", "\"rope_theta\"", "\"sliding_window\": 4096, \"rope_theta\"",
               "field 'sliding_window' = 4096 is not supported"},
          Case{"llama", "\"head_dim\": 10", "\"head_dim\": 12",
               "field 'head_dim' = 12 is outside [10, 10]"},
          Case{"llama", "\"model_type\": \"llama\"", "\"model_type\": \"mistral\"",
               "field 'model_type' = \"mistral\" is not supported (gpt2 or llama)"},
          Case{"gpt2", "\"activation_function\": \"gelu_new\"", "\"activation_function\": \"relu\"",
               "field 'activation_function' = \"relu\" is not supported"},
          Case{"gpt2", "\"scale_attn_by_inverse_layer_idx\": false",
               "\"scale_attn_by_inverse_layer_idx\": true",
               "field 'scale_attn_by_inverse_layer_idx' = true is not supported"},
          Case{"gpt2", "\"n_head\": 5", "\"n_head\": 5.5",
               "field 'n_head' = 5.5 is not an integer"},
          Case{"gpt2", "\"n_layer\": 3,", "", "field 'n_layer' is missing"}}) {
      CAPTURE(k.to);
      const fs::path dir = copy_of(k.model, "fields");
      edit_config(dir, k.from, k.to);
      const std::string m = refused(dir);
      CHECK(m.find(k.says) != std::string::npos);
      CHECK(m.find("config.json") != std::string::npos);
      CHECK(m.find('\n') == std::string::npos);
      fs::remove_all(dir);
    }
  }
  SUBCASE("a shard index that points outside the directory, or to the wrong shard") {
    const fs::path dir = copy_of("llama_bf16", "shards");
    const std::string index = read_text(dir / "model.safetensors.index.json");
    std::string evil = index;
    const std::string first = "\"model-00002-of-00002.safetensors\"";
    evil.replace(evil.find(first), first.size(), "\"../model-00002-of-00002.safetensors\"");
    write_text(dir / "model.safetensors.index.json", evil);
    CHECK(refused(dir).find("is not a file name in the model's directory") != std::string::npos);
    std::string wrong = index;
    const std::string lm = "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"";
    REQUIRE(wrong.find(lm) != std::string::npos);
    wrong.replace(wrong.find(lm), lm.size(),
                  "\"lm_head.weight\": \"model-00001-of-00002.safetensors\"");
    write_text(dir / "model.safetensors.index.json", wrong);
    CHECK(refused(dir).find("tensor 'lm_head.weight' is not in its shard "
                            "model-00001-of-00002.safetensors") != std::string::npos);
    fs::remove(dir / "model.safetensors.index.json");
    CHECK(refused(dir).find("neither model.safetensors nor model.safetensors.index.json") !=
          std::string::npos);
    fs::remove_all(dir);
  }
}

}  // namespace hf_test
