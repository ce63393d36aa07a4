// Tests of attn/io/atomic_file.hpp: atomic replacement, cleanup of temp files on failure, reads.
// Does not simulate crashes or full disks (the failure paths are reached through real errors).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <attn/io/atomic_file.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../test_util.hpp"
#include "io_fixture.hpp"

namespace fs = std::filesystem;
using attn::test::message_of;
using attn::test::TempDir;

TEST_CASE("write_file_atomically: writes, overwrites, and leaves no temp file") {
  TempDir dir;
  const fs::path p = dir / "out.bin";
  attn::io::write_file_atomically(p, std::string_view("first contents, fairly long"));
  CHECK(attn::test::to_string(attn::io::read_file(p)) == "first contents, fairly long");
  attn::io::write_file_atomically(p, std::string_view("short"));  // shorter: no stale tail
  CHECK(attn::test::to_string(attn::io::read_file(p)) == "short");

  const std::vector<std::byte> bytes = {std::byte{0}, std::byte{255}, std::byte{10}};
  attn::io::write_file_atomically(p, bytes);
  CHECK(attn::io::read_file(p) == bytes);
  attn::io::write_file_atomically(p, std::span<const std::byte>());
  CHECK(attn::io::read_file(p).empty());
  CHECK(fs::file_size(p) == 0);
  CHECK(dir.entries() == std::vector<std::string>{"out.bin"});
}

TEST_CASE("write_file_atomically: a missing directory fails cleanly and names the file") {
  TempDir dir;
  const fs::path p = dir / "no_such_dir" / "out.bin";
  const std::string msg = message_of<attn::io_error>(
      [&] { attn::io::write_file_atomically(p, std::string_view("x")); });
  CHECK(msg.find("cannot create temporary file") != std::string::npos);
  CHECK(msg.find(p.string()) != std::string::npos);
  CHECK(msg.find("No such file or directory") != std::string::npos);
  CHECK(!fs::exists(p));
  CHECK(dir.entries().empty());
}

TEST_CASE("write_file_atomically: a failed rename removes the temp file, target untouched") {
  TempDir dir;
  // The target is a non-empty directory: everything up to the rename succeeds, the rename fails.
  const fs::path target = dir / "target";
  fs::create_directories(target);
  attn::io::write_file_atomically(target / "keep.txt", std::string_view("kept"));
  const std::string msg = message_of<attn::io_error>(
      [&] { attn::io::write_file_atomically(target, std::string_view("new")); });
  CHECK(msg.find("cannot rename") != std::string::npos);
  CHECK(msg.find(target.string()) != std::string::npos);
  CHECK(dir.entries() == std::vector<std::string>{"target"});  // no temp file left behind
  CHECK(fs::is_directory(target));
  CHECK(attn::test::to_string(attn::io::read_file(target / "keep.txt")) == "kept");
}

TEST_CASE("write_file_atomically: a path without a file name is an io_error") {
  TempDir dir;
  CHECK(message_of<attn::io_error>([&] {
          attn::io::write_file_atomically(dir.path() / "", std::string_view("x"));
        }).find("does not name a file") != std::string::npos);
}

TEST_CASE("write_file_atomically: concurrent writers never produce a mixed file") {
  TempDir dir;
  const fs::path p = dir / "shared.txt";
  const std::string a(100000, 'a'), b(50000, 'b');
  std::thread ta([&] {
    for (int i = 0; i < 20; ++i) attn::io::write_file_atomically(p, std::string_view(a));
  });
  std::thread tb([&] {
    for (int i = 0; i < 20; ++i) attn::io::write_file_atomically(p, std::string_view(b));
  });
  ta.join();
  tb.join();
  const std::string got = attn::test::to_string(attn::io::read_file(p));
  CHECK((got == a || got == b));
  CHECK(dir.entries() == std::vector<std::string>{"shared.txt"});
}

TEST_CASE("read_file: errors name the file; the size limit is enforced") {
  TempDir dir;
  const fs::path p = dir / "data.bin";
  attn::io::write_file_atomically(p, std::string_view(std::string(100, 'x')));
  CHECK(attn::io::read_file(p, 100).size() == 100);
  const std::string too_big = message_of<attn::io_error>([&] { attn::io::read_file(p, 99); });
  CHECK(too_big.find("larger than the limit of 99 bytes") != std::string::npos);
  CHECK(too_big.find(p.string()) != std::string::npos);

  const std::string missing =
      message_of<attn::io_error>([&] { attn::io::read_file(dir / "missing.bin"); });
  CHECK(missing.find("cannot open") != std::string::npos);
  CHECK(missing.find("missing.bin") != std::string::npos);

  // A directory opens on Linux but cannot be read.
  const std::string directory =
      message_of<attn::io_error>([&] { attn::io::read_file(dir.path()); });
  CHECK(!directory.empty());
  CHECK(directory.find(dir.path().string()) != std::string::npos);
}

TEST_CASE(
    "read_file: only regular files, refused before a byte is read (no hang, no endless read)") {
  TempDir dir;
  // A FIFO with no writer: opening it for reading the usual way would block forever.
  const fs::path fifo = dir / "fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(message_of<attn::io_error>([&] { attn::io::read_file(fifo); }) ==
        "read_file: '" + fifo.string() + "' is a FIFO or pipe, not a regular file");
  // A device that never ends: refused at once, not read up to the limit.
  CHECK(message_of<attn::io_error>([] { attn::io::read_file("/dev/zero"); }) ==
        "read_file: '/dev/zero' is a character device, not a regular file");
  CHECK(message_of<attn::io_error>([&] { attn::io::read_file(dir.path()); }) ==
        "read_file: '" + dir.path().string() + "' is a directory, not a regular file");
  // A symbolic link to a regular file is read through.
  attn::io::write_file_atomically(dir / "real.txt", std::string_view("real"));
  fs::create_symlink(dir / "real.txt", dir / "link.txt");
  CHECK(attn::test::to_string(attn::io::read_file(dir / "link.txt")) == "real");
}

#if defined(__linux__)
TEST_CASE("read_file: files that report size 0 (/proc) are read to the end, within the limit") {
  const std::vector<std::byte> self = attn::io::read_file("/proc/self/status");
  CHECK(self.size() > 0);
  CHECK(message_of<attn::io_error>([] {
          attn::io::read_file("/proc/self/status", 10);
        }).find("larger than the limit") != std::string::npos);
}
#endif

TEST_CASE("remove_stale_temporaries: removes the temp files of dead processes only") {
  TempDir dir;
  const fs::path target = dir / "ckpt.safetensors";
  attn::io::write_file_atomically(target, std::string_view("checkpoint"));
  // A pid that is surely dead: a child that has exited and been waited for.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  const std::string dead = std::to_string(child), self = std::to_string(getpid());
  const auto touch = [&](const std::string& name) {
    attn::io::write_file_atomically(dir / name, std::string_view("partial"));
  };
  touch("ckpt.safetensors.tmp." + dead + ".0");   // stale: removed
  touch("ckpt.safetensors.tmp." + dead + ".17");  // stale: removed
  touch("ckpt.safetensors.tmp." + self + ".3");   // a live process (this one) may be saving
  touch("ckpt.safetensors.tmp.1.0");              // pid 1 is alive
  touch("ckpt.safetensors.tmp." + dead + ".x");   // not the pattern
  touch("ckpt.safetensors.tmp." + dead);          // not the pattern
  touch("other.tmp." + dead + ".0");              // another file's temp
  const std::vector<fs::path> removed = attn::io::remove_stale_temporaries(target);
  CHECK(removed.size() == 2);
  std::vector<std::string> kept{"ckpt.safetensors",
                                "ckpt.safetensors.tmp." + dead,
                                "ckpt.safetensors.tmp." + dead + ".x",
                                "ckpt.safetensors.tmp.1.0",
                                "ckpt.safetensors.tmp." + self + ".3",
                                "other.tmp." + dead + ".0"};
  std::sort(kept.begin(), kept.end());
  CHECK(dir.entries() == kept);
  CHECK(attn::test::to_string(attn::io::read_file(target)) == "checkpoint");
  // A directory that does not exist has nothing left behind in it.
  CHECK(attn::io::remove_stale_temporaries(dir / "none" / "x").empty());
}
