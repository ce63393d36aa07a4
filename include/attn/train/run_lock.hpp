// attn/train/run_lock.hpp: one owner per training run. A RunLock holds an exclusive flock(2) on a
// file of the run (its directory's `.lock`, or `<checkpoint>.lock`) from before the run's files are
// checked until the process ends, so that two processes can never train into, resume or
// overwrite the same run at once: the second is refused with the first one's pid. The kernel
// drops the lock when its holder exits, however it exits (kill -9 included), so a lock is never
// stale; the file itself stays and means nothing without a holder.
// Does not wait for a lock (a run that is in use is an error, not a queue) nor work across
// machines on file systems whose flock is local (some NFS set-ups).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <attn/core/error.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace attn::train {

class RunLock {
 public:
  RunLock() = default;
  // Locks `file` (created if missing; its directory must exist). `what` names the run in the
  // error: "char_gpt: runs/x is in use by another process (pid 123 holds runs/x/.lock) ...".
  RunLock(const std::filesystem::path& file, const std::string& what) : path_(file) {
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ATTN_CHECK(fd_ >= 0, io_error, what, ": cannot open the lock file ", file.string(), ": ",
               std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      const std::string holder = read_holder();
      ::close(fd_);
      fd_ = -1;
      ATTN_CHECK(e != EWOULDBLOCK, value_error, what, " is in use by another process (",
                 holder.empty() ? std::string("its holder") : "pid " + holder, " holds ",
                 file.string(), "): wait for it to end or stop it first");
      throw io_error(what + ": cannot lock " + file.string() + ": " + std::strerror(e));
    }
    // Ours: record the pid for the message a second process prints.
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
  }
  RunLock(RunLock&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }
  RunLock& operator=(RunLock&& o) noexcept {
    if (this != &o) {
      release();
      path_ = std::move(o.path_);
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock() { release(); }

  bool held() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void release() {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the flock
    fd_ = -1;
  }
  std::string read_holder() const {
    char buf[32] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    std::string s(buf, n > 0 ? std::size_t(n) : 0);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s.find_first_not_of("0123456789") == std::string::npos ? s : std::string();
  }

  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace attn::train
