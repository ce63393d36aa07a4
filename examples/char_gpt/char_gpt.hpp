// examples/char_gpt/char_gpt.hpp: what char_gpt's command line (main.cpp) hands to its training
// and sampling code (train.cpp): the options, and the job that runs them inside the data-parallel
// world. Two files so that each compiles alone (the command line without the model, the model
// without CLI11) and a two-core build compiles them side by side.
#pragma once

#include <attn/train/settings.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../common/attention_names.hpp"

namespace attn::dist {
class DataParallel;
}

namespace char_gpt {

using index_t = std::int64_t;

struct TrainOptions {
  std::string data = "data/tinyshakespeare.txt";
  std::vector<std::string> vocab_from;  // extra corpora whose characters join the vocabulary
  std::string attention = "standard";
  std::string positions = "learned";
  std::string arch = "char_gpt";   // char_gpt (the demo's), gpt2 or llama
  std::string export_hf;           // write the trained model here in the Hugging Face format
  std::string tokenizer = "char";  // char or bpe
  std::int64_t bpe_vocab = 1000;   // --tokenizer bpe: tokens of the vocabulary trained on --data
  std::string tokenizer_file;      // --tokenizer bpe: a tokenizer.json to use instead
  index_t layers = 4, heads = 4, embd = 128, block = 64, batch = 32;
  index_t shards = 0;  // data-parallel shards of every batch (0: one per rank)
  std::int64_t steps = 600, warmup = 50;
  std::int64_t stop_at = 0;  // > 0: end this session after that many steps (resume later)
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, beta2 = 0.99, grad_clip = 1.0;
  double dropout = 0.0, train_fraction = 0.9, data_fraction = 1.0;
  index_t data_chunks = 1;  // --data-fraction from each of this many equal pieces of the split
  std::uint64_t seed = 1;
  int threads = 2;
  std::string denormals = "flush";
  std::string precision = "float32";  // of the matrix products: float32 or bf16
  std::int64_t eval_every = 100, eval_batches = 8;
  std::string out = "runs/char_gpt";
  bool overwrite = false;
  std::string resume;
  std::string init_from;  // start from a checkpoint's weights with a fresh optimizer (transfer)
  index_t sample_tokens = 500;
  double temperature = 0.8;
  std::string prompt = "\n";
};

// The train command's settings, each declared once: its option, checks and help, the checkpoint
// metadata (train.<name>) and what --resume does with it come from this table. The model's shape
// is saved in the checkpoint's config.* (io::put_gpt_config) and compared with it there, so its
// rows are not saved here; nor is --vocab-from (the vocabulary itself is saved).
inline void declare_train_settings(attn::train::Settings& s, TrainOptions& t) {
  using attn::train::may_change;
  using attn::train::not_saved;
  // Data and model.
  s.text("data", t.data, "training text (UTF-8)").on_resume(may_change);  // its CRC is checked
  s.text_list("vocab-from", t.vocab_from, "more corpora whose characters join the vocabulary")
      .on_resume(not_saved);  // the vocabulary is the checkpoint's
  s.text("tokenizer", t.tokenizer,
         "tokens of a new model: char (each character of the corpus) or bpe (byte-level BPE as "
         "GPT-2's, trained on --data and --vocab-from to --bpe-vocab tokens, or read from "
         "--tokenizer-file)")
      .choices({"char", "bpe"})
      .on_resume(not_saved);  // the tokenizer is the checkpoint's
  s.integer("bpe-vocab", t.bpe_vocab,
            "--tokenizer bpe: the size of the vocabulary trained on the corpus (256 bytes and "
            "the rest merges)")
      .range(256, 1000000)
      .on_resume(not_saved);
  s.text("tokenizer-file", t.tokenizer_file,
         "--tokenizer bpe: the tokenizer.json of a byte-level BPE (Hugging Face tokenizers' file) "
         "to use instead of training one")
      .on_resume(not_saved);
  s.text("attention", t.attention, "attention variant:" + examples::attention_choices_help())
      .choices(examples::attention_names())
      .on_resume(not_saved);
  s.text("positions", t.positions, "position encoding")
      .choices({"learned", "sinusoidal", "none"})
      .on_resume(not_saved);
  s.text("arch", t.arch,
         "architecture of a new model: char_gpt (LayerNorm, exact GELU, untied head), gpt2 "
         "(tanh GELU, tied head, --attention standard) or llama (RMSNorm, SwiGLU of width "
         "8·embd/3, no biases, untied head, --attention rotary-halves, --positions none)")
      .choices({"char_gpt", "gpt2", "llama"})
      .on_resume(not_saved);  // the checkpoint's config.* holds the architecture
  s.integer("layers", t.layers, "transformer blocks").range(1, 64).on_resume(not_saved);
  s.integer("heads", t.heads, "attention heads (must divide --embd)")
      .range(1, 64)
      .on_resume(not_saved);
  s.integer("embd", t.embd, "model width").range(1, 8192).on_resume(not_saved);
  s.integer("block", t.block, "context length").range(1, 8192).on_resume(not_saved);
  s.real("dropout", t.dropout, "dropout (embeddings, residuals, attention)")
      .range(0, 0.95)
      .on_resume(not_saved);
  // The run: saved, and kept by --resume.
  s.integer("batch", t.batch, "sequences per step").range(1, 4096);
  s.integer("shards", t.shards,
            "data-parallel shards of every batch, summed in a fixed order (0: one per MPI rank); "
            "any rank count that divides it gives the same run")
      .range(0, 4096)
      .on_resume(may_change);
  s.integer("steps", t.steps, "optimizer steps in total").range(1, 100000000);
  s.integer("stop-at", t.stop_at,
            "end this session after this many steps; --resume continues the same run")
      .range(0, 100000000)
      .on_resume(not_saved);
  s.integer("warmup", t.warmup, "linear warmup steps").range(0, 100000000);
  s.real("lr", t.lr, "peak learning rate").range(0, 10);
  s.real("min-lr", t.min_lr, "learning rate at the end of the cosine").range(0, 10);
  s.real("weight-decay", t.weight_decay, "AdamW decoupled weight decay (matrices only)")
      .range(0, 10);
  s.real("beta2", t.beta2, "AdamW beta2").range(0, 0.999999);
  s.real("grad-clip", t.grad_clip, "global gradient-norm clip").range(0, 1e9, true);
  s.real("data-fraction", t.data_fraction, "use only this fraction of the training split")
      .range(0.01, 1);
  s.integer("data-chunks", t.data_chunks,
            "take --data-fraction from the start of each of this many equal pieces of the "
            "training split (1: its start only; more: spread over the whole split)")
      .range(1, 100000);
  s.unsigned_integer("seed", t.seed, "seed for the weights, batches and dropout");
  s.integer("eval-every", t.eval_every, "validate, log and checkpoint every N steps")
      .range(1, 100000000);
  s.integer("eval-batches", t.eval_batches, "validation batches per evaluation").range(1, 100000);
  s.text("denormals", t.denormals,
         "flush: subnormal floats become zero (faster on cores that microcode them); keep: IEEE "
         "gradual underflow (attn/core/float_env.hpp)")
      .choices({"flush", "keep"})
      .on_resume(may_change);
  s.text("precision", t.precision,
         "matrix products: float32, or bf16 (operands rounded to bfloat16, sums in float; on CPUs "
         "with AVX512_BF16, elsewhere float32; attn/core/gemm.hpp)")
      .choices({"float32", "bf16"})
      .on_resume(may_change);
  // This session's.
  s.integer("threads", t.threads, "OpenMP threads").range(1, 256).on_resume(not_saved);
  s.text("out", t.out,
         "output directory (log.csv, loss.svg/png, checkpoint.safetensors, sample.txt)")
      .on_resume(not_saved);
  s.flag("overwrite", t.overwrite, "start a new run even where --out holds one, replacing it")
      .on_resume(not_saved);
  s.text("resume", t.resume,
         "continue the run saved in this checkpoint (in its directory, with its settings)")
      .on_resume(not_saved);
  s.text("init-from", t.init_from,
         "start from this checkpoint's weights and vocabulary, with a fresh optimizer")
      .on_resume(not_saved);
  s.integer("sample-tokens", t.sample_tokens,
            "tokens (characters with --tokenizer char) to sample at the end")
      .range(0, 1000000)
      .on_resume(not_saved);
  s.real("temperature", t.temperature, "sampling temperature").range(0, 100).on_resume(not_saved);
  s.text("prompt", t.prompt,
         "text the sample continues (with --tokenizer char: characters of the vocabulary)")
      .on_resume(not_saved);
  s.text("export-hf", t.export_hf,
         "when the run is done, write the model here as transformers saves a GPT-2 or Llama "
         "(config.json, model.safetensors, the tokenizer files; --arch gpt2 or llama); refused "
         "where it exists, unless --overwrite")
      .on_resume(not_saved);
  // Checkpoints written before a setting existed.
  s.fallback_when_missing("data");
  s.fallback_when_missing("denormals", "keep");
  s.fallback_when_missing("shards", "1");
  s.fallback_when_missing("precision", "float32");  // before data parallelism, one shard
  s.fallback_when_missing("data-chunks", "1");
}

struct SampleOptions {
  std::string checkpoint;
  std::string prompt = "\n";
  index_t tokens = 500;
  double temperature = 0.8;
  index_t top_k = 0;
  std::uint64_t seed = 1;
  bool no_cache = false;
  int threads = 2;
};

// The program's work once its command line is read (train.cpp). Constructed first thing in main:
// joins the MPI job when the program is built with MPI and runs under mpirun.
class Job {
 public:
  Job(int& argc, char**& argv);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Trains (or resumes) a run: `settings` is declare_train_settings' table over `options`, the
  // options given on the command line marked given; a resumed run takes its saved settings into
  // `options` through it.
  int train(TrainOptions& options, attn::train::Settings& settings);
  // Samples from a checkpoint (on rank 0; the other ranks return 0).
  int sample(const SampleOptions& options);
  // Rank 0 of the MPI job (or the only process): the one that prints and writes files.
  bool leader() const;
  // main's exit status, after ending the MPI job; prints `error` (this rank's, "" for none) where
  // it is the one the job reports (see attn::dist::DataParallel::finish).
  int finish(int status, const std::string& error);

 private:
  std::unique_ptr<attn::dist::DataParallel> dp_;
};

}  // namespace char_gpt
