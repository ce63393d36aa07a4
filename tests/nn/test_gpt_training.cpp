// Training a GPT end to end: it overfits a short text; the same seed gives bitwise the same losses
// with 1 and 2 threads; a checkpoint reloads to identical logits and resumes to the identical loss
// trajectory of an uninterrupted run; a step split into data-parallel shards (one process, the
// shards in turn) follows the unsplit step to rounding.
#include <doctest/doctest.h>

#include <unistd.h>
#include <attn/attn.hpp>
#include <attn/data/data.hpp>
#include <attn/io/checkpoint.hpp>
#include <attn/io/io.hpp>
#include <attn/optim/optim.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "../dist/sharded_run.hpp"
#include "../test_util.hpp"

using attn::index_t;
using attn::Tensor;
namespace nn = attn::nn;
namespace optim = attn::optim;
namespace io = attn::io;

namespace {

using Attn =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, float>;
using Model = nn::GPT<Attn>;

const std::string text =
    "First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. First "
    "Citizen: You are all resolved rather to die than to famish? All: Resolved. resolved. First "
    "Citizen: First, you know";  // 200 characters

nn::GPTConfig config_for(const attn::data::CharTokenizer& tok, index_t d, double dropout) {
  nn::GPTConfig c;
  c.vocab_size = tok.size();
  c.block_size = 32;
  c.layers = 2;
  c.heads = 4;
  c.d_model = d;
  c.dropout = dropout;
  c.seed = 7;
  return c;
}

// Steps [from, to) of a run whose batches and dropout depend only on (seed, step), as in
// examples/char_gpt. Returns the loss of each step.
std::vector<float> run_steps(Model& model, optim::AdamW<float>& opt,
                             const attn::data::TextBatches& batches, std::int64_t from,
                             std::int64_t to, index_t batch, std::int64_t total) {
  std::vector<float> losses;
  attn::Tape<float> tape;
  Tensor<std::int32_t> x, y;
  const optim::WarmupCosine schedule{3e-3, 3e-4, 5, total};
  for (std::int64_t step = from; step < to; ++step) {
    attn::Rng rng(1000 + std::uint64_t(step));
    batches.sample(attn::data::Split::train, batch, model.config().block_size, rng, x, y);
    model.reseed(rng.split());
    tape.clear();
    const auto loss = model.loss(tape, x, y);
    tape.backward(loss);
    optim::clip_grad_norm(opt.parameters(), 1.0);
    opt.set_lr(schedule(step));
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item());
  }
  return losses;
}

optim::AdamW<float> make_optimizer(Model& model) {
  optim::AdamConfig c;
  c.lr = 3e-3;
  c.weight_decay = 0.01;
  return optim::AdamW<float>(optim::parameters_of<float>(model), c);
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("attn_test_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace

TEST_CASE("GPT: overfits a 200-character text to a loss below 0.05") {
  // One sequence, the whole text: every position has one right answer given its prefix, so a
  // model that memorises the text drives the loss to 0.
  const auto tok = attn::data::CharTokenizer::from_corpus(text);
  const auto ids = tok.encode(text.substr(0, 200));
  nn::GPTConfig c = config_for(tok, 32, 0.0);
  c.block_size = 199;
  Model model(c);
  auto opt = make_optimizer(model);
  Tensor<std::int32_t> x({1, 199}), y({1, 199});
  std::copy(ids.begin(), ids.end() - 1, x.begin());
  std::copy(ids.begin() + 1, ids.end(), y.begin());
  attn::Tape<float> tape;
  std::vector<float> losses;
  for (int step = 0; step < 100; ++step) {
    tape.clear();
    const auto loss = model.loss(tape, x, y);
    tape.backward(loss);
    optim::clip_grad_norm(opt.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item());
  }
  model.set_training(false);
  tape.clear();
  const float final_loss = model.loss(tape, x, y).item();
  INFO("first loss " << losses.front() << ", loss at step 50 " << losses[50]);
  CHECK(losses.front() > 2.5f);  // about log(vocab) at the start
  CHECK(final_loss < 0.05f);
}

TEST_CASE("GPT training: the same seed gives bitwise identical losses with 1 and 2 threads") {
  const auto tok = attn::data::CharTokenizer::from_corpus(text);
  const auto batches = attn::data::TextBatches::split_at(tok.encode(text), index_t(text.size()));
  auto run = [&](int threads) {
    attn::set_num_threads(threads);
    Model model(config_for(tok, 64, 0.1));
    auto opt = make_optimizer(model);
    return run_steps(model, opt, batches, 0, 20, 8, 20);
  };
  const auto one = run(1), two = run(2);
  attn::set_num_threads(2);
  REQUIRE(one.size() == 20);
  for (std::size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(one[i] == two[i]);  // exact, not approximate
  }
}

TEST_CASE("GPT checkpoint: save -> load gives identical logits; resume gives the same run") {
  const auto tok = attn::data::CharTokenizer::from_corpus(text);
  const auto batches = attn::data::TextBatches::split_at(tok.encode(text), index_t(text.size()));
  const nn::GPTConfig config = config_for(tok, 32, 0.1);
  const auto path = temp_path("resume.safetensors");

  Model uninterrupted(config);
  auto opt_u = make_optimizer(uninterrupted);
  const auto expected = run_steps(uninterrupted, opt_u, batches, 0, 10, 4, 10);

  Model first(config);
  auto opt_1 = make_optimizer(first);
  auto losses = run_steps(first, opt_1, batches, 0, 5, 4, 10);
  {
    io::Safetensors file;
    io::put_parameters(file, first);
    io::put_optimizer_state(file, opt_1);
    io::put_gpt_config(file, first.config());
    file.metadata["vocab"] = tok.vocabulary();
    io::save_safetensors(path, file);
  }
  const io::Safetensors file = io::load_safetensors(path);
  const nn::GPTConfig loaded_config = io::get_gpt_config(file, path.string());
  CHECK(loaded_config.d_model == config.d_model);
  CHECK(loaded_config.dropout == config.dropout);
  CHECK(loaded_config.seed == config.seed);
  // Unsigned metadata (seeds): digits only, an io_error naming the file and the key otherwise.
  {
    io::Safetensors meta;
    for (const auto& [value, ok] :
         std::vector<std::pair<std::string, bool>>{{"18446744073709551615", true},
                                                   {"-1", false},
                                                   {"abc", false},
                                                   {"", false},
                                                   {"1 ", false},
                                                   {"18446744073709551616", false}}) {
      meta.metadata["train.seed"] = value;
      if (ok) {
        CHECK(io::metadata_uint(meta, "train.seed", "m.safetensors") == 18446744073709551615ull);
      } else {
        std::string msg;
        try {
          io::metadata_uint(meta, "train.seed", "m.safetensors");
        } catch (const attn::io_error& e) {
          msg = e.what();
        }
        CHECK(msg ==
              "m.safetensors: metadata 'train.seed' = '" + value + "' is not an unsigned integer");
      }
    }
  }
  Model second(loaded_config);
  io::get_parameters(file, second, path.string());
  auto opt_2 = make_optimizer(second);
  io::get_optimizer_state(file, opt_2, path.string());
  CHECK(opt_2.step_count() == 5);

  SUBCASE("identical logits") {
    first.set_training(false);
    second.set_training(false);
    Tensor<std::int32_t> ids({1, 20});
    const auto enc = tok.encode(text.substr(0, 20));
    std::copy(enc.begin(), enc.end(), ids.begin());
    attn::Tape<float> t1, t2;
    const Tensor<float> a = first(t1, ids).value(), b = second(t2, ids).value();
    REQUIRE(a.shape() == b.shape());
    for (index_t i = 0; i < a.numel(); ++i) CHECK(a[i] == b[i]);
  }
  SUBCASE("identical loss trajectory") {
    const auto rest = run_steps(second, opt_2, batches, 5, 10, 4, 10);
    losses.insert(losses.end(), rest.begin(), rest.end());
    REQUIRE(losses.size() == expected.size());
    for (std::size_t i = 0; i < losses.size(); ++i) {
      CAPTURE(i);
      CHECK(losses[i] == expected[i]);
    }
  }
  SUBCASE("a checkpoint of another architecture is refused by name") {
    nn::GPTConfig other = config;
    other.layers = 1;
    Model small(other);
    CHECK(attn::test::message_of<attn::io_error>([&] {
            io::get_parameters(file, small, "ckpt");
          }).find("unexpected tensor 'blocks.1.") != std::string::npos);
    other = config;
    other.d_model = 16;
    Model narrow(other);
    CHECK(attn::test::message_of<attn::io_error>([&] {
            io::get_parameters(file, narrow, "ckpt");
          }).find("tok_emb.weight") != std::string::npos);
  }
  SUBCASE("a NaN weight is refused on load, by tensor") {
    io::Safetensors bad = file;
    Tensor<float> w = bad.get<float>("tok_emb.weight");
    w[5] = std::nanf("");
    bad.put("tok_emb.weight", w);
    Model third(config);
    CHECK(attn::test::message_of<attn::io_error>([&] { io::get_parameters(bad, third, "ckpt"); }) ==
          "ckpt: tensor 'tok_emb.weight' holds nan at element 5: the checkpoint's weights "
          "are not finite");
  }
  SUBCASE("the blocks' parts round-trip; a checkpoint from before them holds GPT-2's") {
    nn::GPTConfig llama = config;
    llama.norm = nn::NormKind::rms;
    llama.norm_eps = 1e-6;
    llama.feed_forward = nn::FeedForwardKind::swiglu;
    llama.hidden = 40;
    io::Safetensors meta;
    io::put_gpt_config(meta, llama);
    const nn::GPTConfig back = io::get_gpt_config(meta, "m");
    CHECK(back.norm == nn::NormKind::rms);
    CHECK(back.norm_eps == 1e-6);
    CHECK(back.feed_forward == nn::FeedForwardKind::swiglu);
    CHECK(back.hidden == 40);
    for (const char* key :
         {"config.norm", "config.norm_eps", "config.feed_forward", "config.hidden"})
      meta.metadata.erase(key);
    const nn::GPTConfig old = io::get_gpt_config(meta, "m");
    CHECK(old.norm == nn::NormKind::layer);
    CHECK(old.norm_eps == 1e-5);
    CHECK(old.feed_forward == nn::FeedForwardKind::gelu);
    CHECK(old.hidden == 0);
    CHECK(old.init == nn::InitScheme::normal);
    llama.init = nn::InitScheme::mingpt;
    io::put_gpt_config(meta, llama);
    CHECK(io::get_gpt_config(meta, "m").init == nn::InitScheme::mingpt);
    io::put_gpt_config(meta, llama);
    meta.metadata["config.feed_forward"] = "3";
    CHECK(attn::test::message_of<attn::io_error>([&] {
            io::get_gpt_config(meta, "m");
          }).find("'config.feed_forward' = 3 is outside [0, 2]") != std::string::npos);
  }
  SUBCASE("a config out of bounds is refused before anything is allocated") {
    struct Case {
      const char *key, *value, *says;
    };
    for (const Case& c :
         {Case{"config.vocab_size", "2147483648",
               "'config.vocab_size' = 2147483648 is outside [1, "},
          Case{"config.d_model", "65537", "'config.d_model' = 65537 is outside [1, 65536]"},
          Case{"config.heads", "1000", "'config.heads' = 1000 is outside [1, "},
          Case{"config.layers", "0", "'config.layers' = 0 is outside [1, 4096]"}}) {
      io::Safetensors bad = file;
      bad.metadata[c.key] = c.value;
      CAPTURE(c.key);
      CHECK(attn::test::message_of<attn::io_error>([&] {
              io::get_gpt_config(bad, "ckpt");
            }).find(c.says) != std::string::npos);
    }
    io::Safetensors huge = file;
    huge.metadata["config.vocab_size"] = "16777216";
    huge.metadata["config.d_model"] = "65536";
    huge.metadata["config.heads"] = "1";
    CHECK(attn::test::message_of<attn::io_error>([&] {
            io::get_gpt_config(huge, "ckpt");
          }).find("more than 2^36 in all or 2^32 in one table") != std::string::npos);
  }
  std::filesystem::remove(path);
}

TEST_CASE(
    "optim::train_step: micro-batches give the step's loss; an all-ignored batch is refused") {
  const auto tok = attn::data::CharTokenizer::from_corpus(text);
  const std::vector<std::int32_t> ids = tok.encode(text);
  Tensor<std::int32_t> x({4, 16}), y({4, 16});
  for (index_t i = 0; i < 64; ++i) {
    x[i] = ids[std::size_t(i)];
    y[i] = i % 5 == 0 ? -100 : ids[std::size_t(i + 1)];  // some targets ignored
  }
  double losses[2] = {};
  for (const index_t micro : {0, 1}) {
    Model model(config_for(tok, 16, 0.0));
    auto params = optim::parameters_of<float>(model);
    optim::AdamW<float> opt(params, optim::AdamConfig{});
    attn::Tape<float> tape;
    losses[micro] =
        optim::train_step(model, tape, opt, params, x, y, -100, 1e-3, 1.0, 3, micro).loss;
  }
  CHECK(losses[1] == doctest::Approx(losses[0]).epsilon(1e-5));  // 4 chunks of 1 row: the same mean

  Model model(config_for(tok, 16, 0.0));
  auto params = optim::parameters_of<float>(model);
  optim::AdamW<float> opt(params, optim::AdamConfig{});
  attn::Tape<float> tape;
  y.fill(-100);
  CHECK(attn::test::message_of<attn::value_error>(
            [&] { optim::train_step(model, tape, opt, params, x, y, -100, 1e-3, 1.0, 3); }) ==
        "train_step: every target of the batch is ignore_index (-100): there is nothing to "
        "learn from it");
}

TEST_CASE("data-parallel shards in one process: the unsplit step's losses, to rounding") {
  // Without dropout (a shard draws its own masks), S shards differ from one batch only in how the
  // gradient sum is rounded: each chunk's mean is weighted by its share of the counted targets
  // (the rows ignore different numbers of positions), so the weights must be right for the
  // trajectories to agree. The bitwise equality of S ranks and one process is test_dist's.
  attn::dist::DataParallel alone;
  const attn::test::ShardedRun whole = attn::test::sharded_run(alone, 1, 0, 8, 0.0);
  for (const index_t shards : {2, 7}) {
    CAPTURE(shards);
    const attn::test::ShardedRun split = attn::test::sharded_run(alone, shards, 0, 8, 0.0);
    for (std::size_t i = 0; i < whole.losses.size(); ++i) {
      CAPTURE(i);
      CHECK(split.losses[i] == doctest::Approx(whole.losses[i]).epsilon(1e-5));
      CHECK(split.grad_norms[i] == doctest::Approx(whole.grad_norms[i]).epsilon(1e-4));
    }
  }
  // Micro-batches of 2 rows inside each of 3 shards: still the same step.
  const attn::test::ShardedRun micro = attn::test::sharded_run(alone, 3, 2, 8, 0.0);
  for (std::size_t i = 0; i < whole.losses.size(); ++i)
    CHECK(micro.losses[i] == doctest::Approx(whole.losses[i]).epsilon(1e-5));
  // Weighting chunks by their rows instead of their counted targets moves these losses by about
  // 2e-4 relative (tried: the checks above fail), twenty times the tolerance.
}
