// examples/char_gpt: trains a character-level GPT (attn::nn::GPT) on a text file with AdamW and a
// warmup + cosine schedule, logs and plots the losses, saves a resumable safetensors checkpoint,
// and samples from it; `char_gpt sample` samples from a saved checkpoint. Under `mpirun -np N` it
// trains data-parallel (attn/dist/data_parallel.hpp); rank 0 prints and writes the files.
// Does not tokenize beyond characters nor split a model over machines.
//
// This file is the command line; train.cpp trains and samples (char_gpt.hpp is between them).
#include <CLI/CLI.hpp>

#include <string>

#include "../common/cli.hpp"
#include "char_gpt.hpp"

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
  attn::train::Settings settings;  // every option of training, declared once (char_gpt.hpp)
  char_gpt::declare_train_settings(settings, t);
  examples::add_settings(app, settings);
  app.get_option("--data")->check(CLI::ExistingFile);
  app.get_option("--vocab-from")->check(CLI::ExistingFile);
  app.get_option("--resume")->check(CLI::ExistingFile)->excludes("--overwrite");
  app.get_option("--init-from")->check(CLI::ExistingFile)->excludes("--resume");
  app.get_option("--tokenizer-file")->check(CLI::ExistingFile)->excludes("--bpe-vocab");

  using examples::number_in;
  char_gpt::SampleOptions s;
  CLI::App* sample_cmd = app.add_subcommand("sample", "sample text from a checkpoint");
  sample_cmd->add_option("checkpoint", s.checkpoint, "checkpoint.safetensors")
      ->required()
      ->check(CLI::ExistingFile);
  sample_cmd->add_option("--prompt", s.prompt, "text to continue");
  sample_cmd->add_option("--tokens", s.tokens, "tokens to generate (characters of a char model)")
      ->check(CLI::Range(0, 10000000));
  sample_cmd->add_option("--temperature", s.temperature, "0 = greedy")->check(number_in(0, 100));
  sample_cmd->add_option("--top-k", s.top_k, "sample among the k most likely (0 = all)")
      ->check(CLI::Range(0, 1000000));
  sample_cmd->add_option("--seed", s.seed, "sampling seed")->check(examples::unsigned_integer());
  sample_cmd->add_flag("--no-cache", s.no_cache, "recompute the context for every token");
  sample_cmd->add_option("--threads", s.threads, "OpenMP threads")->check(CLI::Range(1, 256));

  std::string error;  // the job prints one rank's error, once (Job::finish)
  const int status = examples::run_main(
      app, argc, argv,
      [&] {
        if (*sample_cmd) return job.sample(s);
        // Option combinations, checked like single options (exit status 2) before any work. A
        // resumed run checks its saved settings instead, which were checked when it started.
        if (t.resume.empty() && t.min_lr > t.lr)
          throw CLI::ValidationError("--min-lr " + examples::shortest(t.min_lr) +
                                     " is above --lr " + examples::shortest(t.lr) +
                                     ": the cosine falls from --lr to --min-lr");
        // --bpe-vocab and --tokenizer-file are options of a new model's --tokenizer bpe, which the
        // second implies (a checkpoint's tokenizer is its own: train.cpp refuses them there).
        const bool new_model = t.resume.empty() && t.init_from.empty();
        if (settings.given("tokenizer-file") && !settings.given("tokenizer")) t.tokenizer = "bpe";
        for (const char* bpe_option : {"bpe-vocab", "tokenizer-file"})
          if (new_model && settings.given(bpe_option) && t.tokenizer != "bpe")
            throw CLI::ValidationError(std::string("--") + bpe_option +
                                       " is an option of --tokenizer bpe, not " + t.tokenizer);
        // An architecture's attention and positions: implied when not given, else checked.
        const auto implied = [&](const char* name, std::string& value,
                                 const std::string& arch_value) {
          if (!settings.given(name))
            value = arch_value;
          else if (value != arch_value)
            throw CLI::ValidationError("--arch " + t.arch + " has --" + name + " " + arch_value +
                                       ", not " + value);
        };
        if (t.arch == "gpt2") implied("attention", t.attention, "standard");
        if (t.arch == "gpt2") implied("positions", t.positions, "learned");
        if (t.arch == "llama") implied("attention", t.attention, "rotary-halves");
        if (t.arch == "llama") implied("positions", t.positions, "none");
        return job.train(t, settings);
      },
      {&error, !job.leader()});
  return job.finish(status, error);
}
