// attn/train/memory.hpp: will a training run fit in memory? A trainer estimates what a
// run needs before its first step (weights, gradients and AdamW's two moments: 16 bytes per
// parameter; the activations one step keeps on the tape, measured on one short sequence and
// scaled) and refuses with the estimate and the memory available (MemAvailable of /proc/meminfo,
// or less where a cgroup limit leaves less), instead of climbing until the kernel kills it.
// Does not limit memory itself, and is an estimate: a run that fits with little to spare may
// still fail (then std::bad_alloc reaches the trainer).
#pragma once

#include <malloc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "../autodiff/nn_ops.hpp"
#include "../core/error.hpp"
#include "../nn/transformer.hpp"

namespace attn::train {

// ---- what the machine has --------------------------------------------------------------------

struct AvailableMemory {
  double bytes = 0;
  std::string source;  // where the number comes from, for the message
};

namespace detail {

inline std::optional<double> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word)) return std::nullopt;
  double v = 0;
  const auto r = std::from_chars(word.data(), word.data() + word.size(), v);
  if (r.ec != std::errc{} || r.ptr != word.data() + word.size()) return std::nullopt;  // "max"
  return v;
}

// The room left under the memory limits of the cgroup `path` (relative to `root`) and of each of
// its ancestors: the least of limit − usage over those with a limit (none: nullopt).
inline std::optional<double> cgroup_room(const std::string& root, std::string path,
                                         const char* limit_file, const char* usage_file) {
  std::optional<double> room;
  for (;;) {
    const std::string dir = root + path;
    const auto limit = read_number(dir + "/" + limit_file);
    const auto usage = read_number(dir + "/" + usage_file);
    // cgroup v1 says "no limit" with a number near 2^63.
    if (limit && usage && *limit < 0x1p60) room = std::min(room.value_or(1e300), *limit - *usage);
    if (path.empty() || path == "/") break;
    path = path.substr(0, path.find_last_of('/'));
  }
  return room;
}

}  // namespace detail

// MemAvailable of /proc/meminfo (what the kernel can give without swapping), or the room under
// this process's cgroup memory limits (v2 memory.max, v1 memory.limit_in_bytes) where that is
// less. nullopt where neither can be read (not Linux).
inline std::optional<AvailableMemory> available_memory() {
  std::optional<AvailableMemory> out;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kb = 0;
    meminfo >> kb;
    if (key == "MemAvailable:") out = AvailableMemory{kb * 1024, "MemAvailable in /proc/meminfo"};
    meminfo.ignore(1 << 20, '\n');
  }
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    // "0::/path" (v2) or "4:memory:/path" (v1); inside a container the path may not exist under
    // the mount, whose root is then the container's own cgroup: try both.
    const std::size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::optional<double> room;
    if (controllers.empty()) {
      room = detail::cgroup_room("/sys/fs/cgroup", path, "memory.max", "memory.current");
      if (!room) room = detail::cgroup_room("/sys/fs/cgroup", "", "memory.max", "memory.current");
    } else if (controllers.find("memory") != std::string::npos) {
      const char* root = "/sys/fs/cgroup/memory";
      room = detail::cgroup_room(root, path, "memory.limit_in_bytes", "memory.usage_in_bytes");
      if (!room)
        room = detail::cgroup_room(root, "", "memory.limit_in_bytes", "memory.usage_in_bytes");
    }
    if (room && (!out || *room < out->bytes))
      out = AvailableMemory{std::max(0.0, *room),
                            "the room under this process's cgroup memory limit"};
  }
  return out;
}

// "1.5 GB", "740 MB", "12 kB" (powers of 1000).
inline std::string bytes_text(double b) {
  char buf[32];
  if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.1f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  return buf;
}

// ---- what a run needs ------------------------------------------------------------------------

struct MemoryEstimate {
  double parameters = 0;   // weights and their gradients: 8 bytes per float parameter
  double optimizer = 0;    // AdamW's first and second moments: 8 bytes per parameter
  double activations = 0;  // what the tape keeps of one step
  std::string activations_how;
  double total() const { return parameters + optimizer + activations; }
};

// Throws value_error when `need` is more than the memory available, with both numbers and what
// to change. Returns "about 1.2 GB of the 20.6 GB available" for the run's header ("about 1.2 GB"
// where the available memory cannot be read: then nothing is refused).
inline std::string check_memory(const MemoryEstimate& need, std::string_view program,
                                std::string_view what_to_change) {
  const std::optional<AvailableMemory> have = available_memory();
  if (!have) return "about " + bytes_text(need.total());
  if (need.total() <= have->bytes)
    return "about " + bytes_text(need.total()) + " of the " + bytes_text(have->bytes) +
           " available";
  const std::string activations =
      need.activations_how.empty() ? std::string("; activations not counted")
                                   : ", activations of one step " + bytes_text(need.activations) +
                                         ": " + need.activations_how;
  throw value_error(std::string(program) + ": this run needs about " + bytes_text(need.total()) +
                    " of memory (parameters and gradients " + bytes_text(need.parameters) +
                    ", optimizer state " + bytes_text(need.optimizer) + activations +
                    "), more than the " + bytes_text(have->bytes) + " available (" + have->source +
                    "); " + std::string(what_to_change));
}

// A first look before a model is built, from its shape alone: a GPT's parameter count is about
// L (12 D² + 13 D) + (2V + T) D (blocks, embeddings, head); building a model that cannot fit
// would fail (or be killed) before any estimate is made.
inline MemoryEstimate parameters_estimate(const nn::GPTConfig& c) {
  const double d = double(c.d_model);
  const double p = double(c.layers) * (12 * d * d + 13 * d) +
                   (2 * double(c.vocab_size) + double(c.block_size)) * d;
  MemoryEstimate e;
  e.parameters = 8 * p;
  e.optimizer = 8 * p;
  return e;
}

// Bytes the heap holds in use (glibc); nullopt elsewhere.
inline std::optional<double> heap_in_use() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  return double(m.uordblks) + double(m.hblkhd);
#else
  return std::nullopt;
#endif
}

// The memory of a training run of `model` (built, so its parameter count is exact) on `rows`
// sequences of `length` tokens per step (per micro-batch when steps are split). The activations
// are measured, whatever the attention variant: the heap the tape keeps after a forward and
// backward pass over one sequence of length t1 = min(length, 64) and one of t2 = min(length, 128)
// gives a(t) = αt + βt² (linear layers grow with t, materialised attention weights with t²),
// and one step keeps rows · a(length). Leaves the model's gradients zeroed.
template <class Model>
MemoryEstimate training_memory(Model& model, index_t length, index_t rows) {
  MemoryEstimate e;
  const double p = double(nn::parameter_count(model));
  e.parameters = 8 * p;
  e.optimizer = 8 * p;
  const std::int32_t vocab = std::int32_t(model.config().vocab_size);
  const auto measure = [&](index_t t) -> std::optional<double> {
    Tape<float> probe;  // a tape of its own: its buffers are freed when it goes
    Tensor<std::int32_t> x(Shape{1, t}), y(Shape{1, t});
    for (index_t i = 0; i < t; ++i) {
      x[i] = std::int32_t(i * 7 % vocab);
      y[i] = std::int32_t((i * 7 + 1) % vocab);
    }
    const std::optional<double> before = heap_in_use();
    const Var<float> loss = cross_entropy(model(probe, x), y);
    probe.backward(loss);
    const std::optional<double> after = heap_in_use();
    model.for_each_parameter([](const std::string&, Parameter<float>& q) { q.grad.fill(0); });
    if (!before || !after) return std::nullopt;
    return std::max(0.0, *after - *before);
  };
  const index_t t1 = std::min<index_t>(length, 64), t2 = std::min<index_t>(length, 128);
  const std::optional<double> a1 = measure(t1), a2 = t2 > t1 ? measure(t2) : a1;
  if (!a1 || !a2) return e;  // no heap statistics here: parameters only
  double per_row = *a1;
  if (t2 > t1) {
    // a(t) = αt + βt² through (t1, a1) and (t2, a2); β >= 0 (noise must not bend it down).
    const double d1 = double(t1), d2 = double(t2);
    const double beta = std::max(0.0, (*a2 / d2 - *a1 / d1) / (d2 - d1));
    const double alpha = std::max(0.0, *a1 / d1 - beta * d1);
    const double t = double(length);
    per_row = alpha * t + beta * t * t;
  }
  e.activations = per_row * double(rows);
  char how[160];
  std::snprintf(how, sizeof how, "%lld sequences of %lld tokens, %s each (measured)",
                (long long)rows, (long long)length, bytes_text(per_row).c_str());
  e.activations_how = how;
  return e;
}

}  // namespace attn::train
