// benchmarks/bpe: byte-level BPE speed. Trains a tokenizer of --vocab tokens on a corpus
// (train_bpe), then encodes the corpus --reps times as one text and --reps times line by line
// (each line with its '\n' a text of its own) and prints each median's throughput in MB/s (10^6
// bytes of text per second, one thread). With --save DIR it writes the tokenizer there
// (vocab.json, merges.txt, tokenizer.json) and the ids (ids.txt and ids_lines.txt, one a line),
// which benchmarks/bpe_vs_hf.py hands to Hugging Face tokenizers for the same measurement.
//
//   build/bpe-release/benchmarks/bench_bpe data/tinyshakespeare.txt --vocab 1000
//   build/oracle-venv/bin/python benchmarks/bpe_vs_hf.py --bench
//   build/bpe-release/benchmarks/bench_bpe
#include <CLI/CLI.hpp>

#include <algorithm>
#include <attn/data/bpe.hpp>
#include <attn/io/bpe_files.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Byte-level BPE: training time and encoding throughput on one thread");
  std::string corpus_path, save;
  int vocab = 1000, reps = 5;
  app.add_option("corpus", corpus_path, "a text file")->required();
  app.add_option("--vocab", vocab, "tokens to train")->check(CLI::Range(256, 1 << 20));
  app.add_option("--reps", reps, "encodings of the corpus timed (the median is printed)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--save", save, "a folder for the tokenizer and the corpus' ids");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::vector<std::byte> bytes = attn::io::read_file(corpus_path);
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());

    auto t = std::chrono::steady_clock::now();
    const attn::data::BpeTokenizer tok = attn::data::train_bpe(text, vocab);
    const double train_s = seconds_since(t);

    std::vector<std::string_view> lines;
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t end = std::min(text.find('\n', pos), text.size() - 1) + 1;
      lines.push_back(std::string_view(text).substr(pos, end - pos));
      pos = end;
    }
    const auto median_of = [&](auto&& encode) {
      std::vector<double> times;
      for (int r = 0; r < reps; ++r) {
        t = std::chrono::steady_clock::now();
        encode();
        times.push_back(seconds_since(t));
      }
      std::sort(times.begin(), times.end());
      return times[times.size() / 2];
    };
    std::vector<std::int32_t> ids, ids_lines;
    const double whole_s = median_of([&] { ids = tok.encode(text); });
    const double lines_s = median_of([&] {
      ids_lines.clear();
      for (std::string_view line : lines) {
        const std::vector<std::int32_t> v = tok.encode(line);
        ids_lines.insert(ids_lines.end(), v.begin(), v.end());
      }
    });
    if (tok.decode(ids) != text || tok.decode(ids_lines) != text) {
      std::fprintf(stderr, "error: decode(encode(corpus)) differs from the corpus\n");
      return 1;
    }
    std::printf("attn: trained %d tokens (%zu merges) in %.3f s\n", tok.size(), tok.merges().size(),
                train_s);
    std::printf("attn: %zu bytes as one text: %zu ids, median of %d %.4f s = %.2f MB/s\n",
                text.size(), ids.size(), reps, whole_s, double(text.size()) / whole_s / 1e6);
    std::printf("attn: %zu bytes as %zu lines: %zu ids, median of %d %.4f s = %.2f MB/s\n",
                text.size(), lines.size(), ids_lines.size(), reps, lines_s,
                double(text.size()) / lines_s / 1e6);
    if (!save.empty()) {
      attn::io::save_bpe(tok, save);
      const std::pair<const char*, const std::vector<std::int32_t>*> lists[] = {
          {"ids.txt", &ids}, {"ids_lines.txt", &ids_lines}};
      for (const auto& [name, list] : lists) {
        std::string out;
        for (std::int32_t id : *list) out += std::to_string(id) + "\n";
        attn::io::write_file_atomically(std::filesystem::path(save) / name, out);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
