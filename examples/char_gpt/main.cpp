// examples/char_gpt: trains a character-level GPT (attn::nn::GPT) on a text file with AdamW and a
// warmup + cosine schedule, logs and plots the losses, saves a resumable safetensors checkpoint,
// and samples from it; `char_gpt sample` samples from a saved checkpoint. Under `mpirun -np N` it
// trains data-parallel (examples/common/distributed.hpp); rank 0 prints and writes the files.
// Does not tokenize beyond characters nor split a model over machines.
//
// This file is the command line; train.cpp trains and samples (char_gpt.hpp is between them).
#include <CLI/CLI.hpp>

#include <set>
#include <string>

#include "../common/attention_names.hpp"
#include "../common/cli.hpp"
#include "char_gpt.hpp"

namespace {

// The long names of the options given on `app`'s command line ("--out", ...).
std::set<std::string> given_options(const CLI::App& app) {
  std::set<std::string> given;
  for (const CLI::Option* option : app.get_options())
    if (option->count() > 0)
      for (const std::string& name : option->get_lnames()) given.insert("--" + name);
  return given;
}

}  // namespace

int main(int argc, char** argv) {
  char_gpt::Job job(argc, argv);  // the MPI job, when run under mpirun
  CLI::App app{"char_gpt: train a character-level GPT with attn, or sample from a checkpoint"};
  app.footer(
      "A new run refuses an --out that holds a run (checkpoint.safetensors or log.csv) unless "
      "--overwrite is given; --resume continues a run in its own directory with its saved "
      "settings (an option that contradicts them is an error). Ctrl-C finishes the step, saves, "
      "plots and exits with status 130; a second Ctrl-C quits at once.\n"
      "Exit status: 0 done, 1 error, 2 bad option, 130 interrupted (saved).");
  char_gpt::TrainOptions t;
  std::string choices;
  for (const auto& [name, help] : examples::attention_help())
    choices += "\n  " + name + ": " + help;
  using examples::number_in;
  app.add_option("--data", t.data, "training text (UTF-8)")->check(CLI::ExistingFile);
  app.add_option("--vocab-from", t.vocab_from, "more corpora whose characters join the vocabulary")
      ->check(CLI::ExistingFile);
  app.add_option("--attention", t.attention, "attention variant:" + choices)
      ->check(CLI::IsMember(examples::attention_names()));
  app.add_option("--positions", t.positions, "position encoding")
      ->check(CLI::IsMember({"learned", "sinusoidal", "none"}));
  app.add_option("--layers", t.layers, "transformer blocks")->check(CLI::Range(1, 64));
  app.add_option("--heads", t.heads, "attention heads (must divide --embd)")
      ->check(CLI::Range(1, 64));
  app.add_option("--embd", t.embd, "model width")->check(CLI::Range(1, 8192));
  app.add_option("--block", t.block, "context length")->check(CLI::Range(1, 8192));
  app.add_option("--batch", t.batch, "sequences per step")->check(CLI::Range(1, 4096));
  app.add_option("--shards", t.shards,
                 "data-parallel shards of every batch, summed in a fixed order (default: one per "
                 "MPI rank); any rank count that divides it gives the same run")
      ->check(CLI::Range(0, 4096));
  app.add_option("--steps", t.steps, "optimizer steps in total")->check(CLI::Range(1, 100000000));
  app.add_option("--stop-at", t.stop_at,
                 "end this session after this many steps; --resume continues the same run")
      ->check(CLI::Range(0, 100000000));
  app.add_option("--warmup", t.warmup, "linear warmup steps")->check(CLI::Range(0, 100000000));
  app.add_option("--lr", t.lr, "peak learning rate")->check(number_in(0, 10));
  app.add_option("--min-lr", t.min_lr, "learning rate at the end of the cosine")
      ->check(number_in(0, 10));
  app.add_option("--weight-decay", t.weight_decay, "AdamW decoupled weight decay (matrices only)")
      ->check(number_in(0, 10));
  app.add_option("--beta2", t.beta2, "AdamW beta2")->check(number_in(0, 0.999999));
  app.add_option("--grad-clip", t.grad_clip, "global gradient-norm clip")
      ->check(number_in(0, 1e9, true));
  app.add_option("--dropout", t.dropout, "dropout (embeddings, residuals, attention)")
      ->check(number_in(0, 0.95));
  app.add_option("--data-fraction", t.data_fraction, "use only this fraction of the training split")
      ->check(number_in(0.01, 1));
  app.add_option("--seed", t.seed, "seed for the weights, batches and dropout")
      ->check(examples::unsigned_integer());
  app.add_option("--threads", t.threads, "OpenMP threads")->check(CLI::Range(1, 256));
  app.add_option("--eval-every", t.eval_every, "validate, log and checkpoint every N steps")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--eval-batches", t.eval_batches, "validation batches per evaluation")
      ->check(CLI::Range(1, 100000));
  app.add_option("--out", t.out,
                 "output directory (log.csv, loss.svg/png, checkpoint.safetensors, sample.txt)");
  app.add_flag("--overwrite", t.overwrite,
               "start a new run even where --out holds one, replacing it");
  app.add_option("--resume", t.resume,
                 "continue the run saved in this checkpoint (in its directory, with its settings)")
      ->check(CLI::ExistingFile)
      ->excludes("--overwrite");
  app.add_option("--init-from", t.init_from,
                 "start from this checkpoint's weights and vocabulary, with a fresh optimizer")
      ->check(CLI::ExistingFile)
      ->excludes("--resume");
  app.add_option("--sample-tokens", t.sample_tokens, "characters to sample at the end")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--temperature", t.temperature, "sampling temperature")->check(number_in(0, 100));
  app.add_option("--prompt", t.prompt, "text the sample continues (characters of the vocabulary)");

  char_gpt::SampleOptions s;
  CLI::App* sample_cmd = app.add_subcommand("sample", "sample text from a checkpoint");
  sample_cmd->add_option("checkpoint", s.checkpoint, "checkpoint.safetensors")
      ->required()
      ->check(CLI::ExistingFile);
  sample_cmd->add_option("--prompt", s.prompt, "text to continue");
  sample_cmd->add_option("--tokens", s.tokens, "characters to generate")
      ->check(CLI::Range(0, 10000000));
  sample_cmd->add_option("--temperature", s.temperature, "0 = greedy")->check(number_in(0, 100));
  sample_cmd->add_option("--top-k", s.top_k, "sample among the k most likely (0 = all)")
      ->check(CLI::Range(0, 1000000));
  sample_cmd->add_option("--seed", s.seed, "sampling seed")->check(examples::unsigned_integer());
  sample_cmd->add_flag("--no-cache", s.no_cache, "recompute the context for every token");
  sample_cmd->add_option("--threads", s.threads, "OpenMP threads")->check(CLI::Range(1, 256));

  return job.finish(examples::run_main(app, argc, argv, [&] {
    if (*sample_cmd) return job.sample(s);
    return job.train(t, given_options(app));
  }));
}
