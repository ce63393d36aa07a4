// tests/consumer/trainer.cpp: a trainer written outside attn, of a model of its own (a character
// model: embedding, tanh, linear), on attn/train: its settings declared once (the command line,
// the checkpoint's metadata and the resume checks come from the table), a run directory with one
// owner, the loop with Ctrl-C, the session a resume continues (one attn::train::Trainer), exact
// resume. run_consumer.cmake
// runs it: a run interrupted by SIGINT and resumed ends with the same bits as one that was not, and
// a new run refuses to replace an earlier one. Prints "step N loss L parameters <hash>" when it
// ends; exit 0 done, 1 error, 2 bad option, 130.
#include <attn/attn.hpp>
#include <attn/data/char_tokenizer.hpp>
#include <attn/io/checkpoint.hpp>
#include <attn/train/settings.hpp>
#include <attn/train/trainer.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace {

using attn::index_t;
namespace train = attn::train;

struct CharModel {
  attn::nn::Embedding<float> embed;
  attn::nn::Linear<float> head;
  CharModel(index_t vocab, index_t width, std::uint64_t seed) {
    attn::Rng rng(seed);
    embed = attn::nn::Embedding<float>(vocab, width, 0.5, rng);
    head = attn::nn::Linear<float>(width, vocab, true, 0.2, rng);
  }
  attn::Var<float> operator()(attn::Tape<float>& tape, const attn::Tensor<std::int32_t>& x) {
    return head(attn::Var<float>(attn::tanh(embed(tape, x))));
  }
  void reseed(std::uint64_t) {}  // no dropout
  template <class F>
  void for_each_parameter(F&& f) {
    embed.for_each_parameter(f, "embed");
    head.for_each_parameter(f, "head");
  }
};

int run(int argc, char** argv) {
  std::int64_t steps = 60, stop_at = 0, interrupt_at = -1, width = 16;
  double lr = 0.05;
  std::uint64_t seed = 1;
  std::string out = "run";
  bool resume = false, overwrite = false;
  train::Settings s;
  s.integer("steps", steps, "optimizer steps").range(1, 1e6);
  s.integer("width", width, "embedding width").range(1, 1024);
  s.real("lr", lr, "learning rate").range(0, 10, true);
  s.unsigned_integer("seed", seed, "seed of weights and batches");
  s.text("out", out, "the run's directory").on_resume(train::not_saved);
  s.integer("stop-at", stop_at, "end this session after that step").on_resume(train::not_saved);
  s.integer("interrupt-at", interrupt_at, "send SIGINT to itself in that step (tests)")
      .on_resume(train::not_saved);
  s.flag("resume", resume, "continue the run in --out").on_resume(train::not_saved);
  s.flag("overwrite", overwrite, "replace an earlier run in --out").on_resume(train::not_saved);
  s.parse_command_line(argc, argv);

  const train::StopRequest stop;
  const std::filesystem::path dir = out, checkpoint = dir / "checkpoint.safetensors";
  train::Trainer trainer({checkpoint, dir / "log.csv", {"step", "loss"}, {}, dir / ".lock"},
                         {.program = "trainer",
                          .option = "--out",
                          .where = dir,
                          .resuming = resume,
                          .overwrite = overwrite,
                          .how_to_continue = "continue it with --resume",
                          .inputs = {}},
                         stop);
  attn::io::Safetensors saved;
  train::RunPoint from;
  if (resume) {
    saved = attn::io::load_safetensors(checkpoint);
    s.resume_from(saved.metadata, checkpoint.string(), "--stop-at may change");
    from = train::read_run_point(saved.metadata, checkpoint.string());
  }
  const train::Session& session =
      trainer.start_session({.from = from,
                             .total = steps,
                             .stop_at = stop_at,
                             .source = resume ? checkpoint.string() : "",
                             .checkpoint = checkpoint.string(),
                             .continue_with = "trainer --resume --out " + out});
  if (session.finished()) {
    std::printf("%s\n", session.finished_line("trainer").c_str());
    return 0;
  }

  const std::string text =
      "the quick brown fox jumps over the lazy dog; pack my box with five dozen jugs";
  const auto tok = attn::data::CharTokenizer::from_corpus(text);
  const std::vector<std::int32_t> ids = tok.encode(text);
  CharModel model(tok.size(), width, seed);
  auto params = attn::optim::parameters_of<float>(model);
  attn::optim::AdamConfig ac;
  ac.lr = lr;
  attn::optim::AdamW<float> opt(params, ac);
  if (resume) {
    attn::io::get_parameters(saved, model, checkpoint.string());
    attn::io::get_optimizer_state(saved, opt, checkpoint.string());
  }

  attn::Tape<float> tape;
  attn::Tensor<std::int32_t> x(attn::Shape{8, 12}), y(attn::Shape{8, 12});
  const auto step = [&](std::int64_t k) {
    attn::Rng rng(train::step_seed(seed, 1, k));  // the batch of step k, whichever session runs it
    for (index_t r = 0; r < 8; ++r) {
      const index_t at = index_t(rng.uniform_int(std::uint64_t(ids.size() - 13)));
      for (index_t t = 0; t < 12; ++t)
        x[r * 12 + t] = ids[std::size_t(at + t)], y[r * 12 + t] = ids[std::size_t(at + t + 1)];
    }
    if (k == interrupt_at) std::raise(SIGINT);
    return attn::optim::train_step(model, tape, opt, params, x, y, -100, lr, 1.0, 0);
  };
  double loss = 0;
  train::StepHooks hooks;  // the hooks this trainer needs; the others stay empty
  hooks.save_every = 10;
  hooks.save = [&](const train::RunPoint& point) {
    attn::io::Safetensors file;
    attn::io::put_parameters(file, model);
    attn::io::put_optimizer_state(file, opt);
    train::save_run_point(file.metadata, s, point);
    attn::io::save_safetensors(checkpoint, file);
  };
  hooks.log = [&](const train::StepReport& r, const train::RunPoint&, bool) {
    loss = r.result.loss;
    return std::optional<std::vector<double>>({double(r.steps_done), r.result.loss});
  };
  const train::LoopEnd e = trainer.run(96, step, hooks);
  if (const std::string line = session.end_line(e); !line.empty())
    std::printf("%s\n", line.c_str());
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a of every parameter's bytes
  model.for_each_parameter([&](const std::string&, attn::Parameter<float>& p) {
    const auto* b = reinterpret_cast<const unsigned char*>(p.value.data());
    for (std::size_t i = 0; i < std::size_t(p.value.numel()) * sizeof(float); ++i)
      hash = (hash ^ b[i]) * 1099511628211ull;
  });
  std::printf("step %lld loss %.6f parameters %016llx\n", (long long)e.steps_done, loss,
              (unsigned long long)hash);
  return trainer.exit_status(e);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const attn::value_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
