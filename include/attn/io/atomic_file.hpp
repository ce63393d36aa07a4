// attn/io/atomic_file.hpp: whole-file reads, and writes that replace a file atomically (temp file
// in the same directory, fsync, rename). Does not lock files or merge concurrent writers: the last
// rename wins, and a reader sees either the old file or the new one, never a mix.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../core/error.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#define ATTN_IO_POSIX 1
#elif defined(_WIN32)
#include <io.h>
#include <process.h>
#endif

namespace attn::io {

// read_file's default limit: large enough for any checkpoint this library trains, small enough
// that a wrong path (a device, a huge log) fails with a message instead of exhausting memory.
inline constexpr std::size_t default_read_limit =
    static_cast<std::size_t>(std::min<std::uint64_t>(std::uint64_t{1} << 34,  // 16 GiB
                                                     std::numeric_limits<std::size_t>::max()));

namespace detail {

struct FileClose {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileClose>;

// The text of an errno value, e.g. "No such file or directory".
inline std::string errno_text(int err) {
  return std::generic_category().message(err);
}

inline unsigned long process_id() {
#if defined(ATTN_IO_POSIX)
  return static_cast<unsigned long>(::getpid());
#elif defined(_WIN32)
  return static_cast<unsigned long>(::_getpid());
#else
  return 0;
#endif
}

// A number unique within this process, so two threads writing the same path use two temp files.
inline unsigned long long next_temp_counter() {
  static std::atomic<unsigned long long> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

// Flushes the file's data to the device, so the rename below cannot become visible before the
// data does (a crash between the two would otherwise leave an empty or partial file at `path`).
inline int sync_file(std::FILE* f) {
#if defined(ATTN_IO_POSIX)
  return ::fsync(::fileno(f));
#elif defined(_WIN32)
  return ::_commit(::_fileno(f));
#else
  (void)f;
  return 0;
#endif
}

// Best effort: makes the rename itself durable by syncing the directory entry. Failure is
// ignored (some file systems cannot fsync a directory); the file's contents are already synced.
inline void sync_directory(const std::filesystem::path& dir) {
#if defined(ATTN_IO_POSIX) && defined(O_DIRECTORY)
  const std::string name = dir.empty() ? std::string(".") : dir.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)::fsync(fd);
    (void)::close(fd);
  }
#else
  (void)dir;
#endif
}

}  // namespace detail

// Writes `bytes` to `path` atomically: a temp file in the same directory
// (path + ".tmp.<pid>.<counter>"), fwrite, fflush, fsync, close, then std::filesystem::rename over
// `path`. On any failure removes the temp file and throws io_error naming the file and the failing
// step, e.g. "write_file_atomically: cannot create temporary file 'out/x.tmp.7.0' for 'out/x': No
// such file or directory". `path` is never half-written: it keeps its old contents or gets all
// the new ones. A symlink at `path` is replaced by the file, not followed.
inline void write_file_atomically(const std::filesystem::path& path,
                                  std::span<const std::byte> bytes) {
  namespace fs = std::filesystem;
  ATTN_CHECK(path.has_filename(), io_error, "write_file_atomically: '", path.string(),
             "' does not name a file");
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(detail::process_id()) + "." +
         std::to_string(detail::next_temp_counter());

  // "x": fail rather than share a temp file that somehow already exists.
  detail::FilePtr file(std::fopen(tmp.string().c_str(), "wbx"));
  if (!file) {
    const int err = errno;
    throw io_error(attn::detail::message("write_file_atomically: cannot create temporary file '",
                                         tmp.string(), "' for '", path.string(),
                                         "': ", detail::errno_text(err)));
  }

  // Every failure below removes the temp file before throwing.
  auto fail = [&](const char* step, const std::string& why) {
    file.reset();
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw io_error(attn::detail::message("write_file_atomically: cannot ", step, " '", tmp.string(),
                                         "' (for '", path.string(), "'): ", why));
  };

  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size())
    fail("write", detail::errno_text(errno));
  if (std::fflush(file.get()) != 0) fail("flush", detail::errno_text(errno));
  if (detail::sync_file(file.get()) != 0) fail("fsync", detail::errno_text(errno));
  // fclose can report a deferred write error (NFS, quota); it closes the stream either way.
  if (std::fclose(file.release()) != 0) fail("close", detail::errno_text(errno));

  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fail("rename", "rename onto the target failed: " + ec.message());
  detail::sync_directory(path.parent_path());
}

inline void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

// Removes the temporary files that write_file_atomically left next to `path` when its process
// died during a save (kill -9, a crash, a second Ctrl-C): files named
// path.filename() + ".tmp.<pid>.<n>" in path's directory whose process <pid> no longer runs. A
// temp file of a live process (another program saving to the same place right now) is kept, and
// so is one whose pid has been reused since (the safe side). Returns the paths removed; removes
// nothing where processes cannot be asked about (not POSIX). Throws io_error when a stale file
// cannot be removed.
inline std::vector<std::filesystem::path> remove_stale_temporaries(
    const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> removed;
#if defined(ATTN_IO_POSIX)
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const std::string prefix = path.filename().string() + ".tmp.";
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return removed;  // no directory: nothing left behind
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    // <pid>.<n>, both decimal, nothing else.
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    const std::size_t dot = rest.find('.');
    const auto digits = [](std::string_view s) {
      return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == s.npos;
    };
    if (dot == rest.npos || !digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1))) continue;
    const long long pid = std::stoll(std::string(rest.substr(0, dot)));
    const bool alive = pid > 0 && pid <= std::numeric_limits<pid_t>::max() &&
                       (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (alive) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
    if (rm)
      throw io_error(attn::detail::message("remove_stale_temporaries: cannot remove '",
                                           it->path().string(), "': ", rm.message()));
    removed.push_back(it->path());
  }
#else
  (void)path;
#endif
  return removed;
}

namespace detail {

// What a file that is not a regular file is, for read_file's message.
inline const char* file_kind([[maybe_unused]] unsigned mode) {
#if defined(ATTN_IO_POSIX)
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO or pipe";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
#endif
  return "not a regular file";
}

// Opens `path` for reading, refusing anything but a regular file before reading a byte: a FIFO
// without a writer would block forever and a device (/dev/zero) never end. On POSIX the file is
// opened without blocking (a FIFO's open would wait for a writer), checked with fstat on the
// descriptor itself (no race with a rename), then read normally.
inline FilePtr open_regular_file(const std::filesystem::path& path) {
#if defined(ATTN_IO_POSIX)
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw io_error(
        attn::detail::message("read_file: cannot open '", path.string(), "': ", errno_text(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const unsigned mode = st.st_mode;
    ::close(fd);
    throw io_error(attn::detail::message("read_file: '", path.string(), "' is ", file_kind(mode),
                                         ", not a regular file"));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  FilePtr file(::fdopen(fd, "rb"));
  if (!file) {
    const int err = errno;
    ::close(fd);
    throw io_error(
        attn::detail::message("read_file: cannot open '", path.string(), "': ", errno_text(err)));
  }
  return file;
#else
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw io_error(attn::detail::message("read_file: '", path.string(), "' is not a regular file"));
  FilePtr file(std::fopen(path.string().c_str(), "rb"));
  if (!file) {
    const int err = errno;
    throw io_error(
        attn::detail::message("read_file: cannot open '", path.string(), "': ", errno_text(err)));
  }
  return file;
#endif
}

}  // namespace detail

// The whole contents of the regular file `path`. Throws io_error naming the file when it cannot
// be opened or read, when it is not a regular file (a directory, a FIFO or pipe, a device: said
// before reading anything, so neither blocks nor runs forever), or when it holds more than
// `max_bytes` bytes (checked before reading, and again while reading a file that grows).
inline std::vector<std::byte> read_file(const std::filesystem::path& path,
                                        std::size_t max_bytes = default_read_limit) {
  detail::FilePtr file = detail::open_regular_file(path);
  // The size on disk sizes the one allocation of the usual case; the loop still reads to the end
  // of the file (a file that grew while being read, up to max_bytes).
  std::error_code ec;
  const std::uintmax_t hint = std::filesystem::file_size(path, ec);
  ATTN_CHECK(ec || hint <= max_bytes, io_error, "read_file: '", path.string(), "' (", hint,
             " bytes) is larger than the limit of ", max_bytes, " bytes");
  std::vector<std::byte> out(ec ? 0 : static_cast<std::size_t>(hint));
  constexpr std::size_t chunk = std::size_t{1} << 16;
  std::size_t size = 0;
  for (;;) {
    if (size == out.size()) {
      // Full: probe one byte before growing, so a file of exactly the hinted size never
      // reallocates.
      const int c = std::fgetc(file.get());
      if (c == EOF) break;
      ATTN_CHECK(size < max_bytes, io_error, "read_file: '", path.string(),
                 "' is larger than the limit of ", max_bytes, " bytes");
      out.resize(size + std::min(std::max(chunk, size), max_bytes - size));
      out[size++] = static_cast<std::byte>(c);
    }
    const std::size_t got = std::fread(out.data() + size, 1, out.size() - size, file.get());
    size += got;
    if (got == 0 && (std::feof(file.get()) || std::ferror(file.get()))) break;
  }
  if (std::ferror(file.get())) {
    const int err = errno;
    throw io_error(attn::detail::message("read_file: cannot read '", path.string(),
                                         "': ", detail::errno_text(err)));
  }
  out.resize(size);
  return out;
}

}  // namespace attn::io
