// PipeSource (see pipe_source.h): /bin/sh -c CMD through posix_spawn, stdout as the stream, stderr's tail kept.
#include "data/io/pipe_source.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

extern char** environ;

namespace vlm {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Every step of building the spawn attributes, checked; the first failure wins.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  int err = 0;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  void check(int rc) {
    if (err == 0 && rc != 0) err = rc;
  }
};

}  // namespace

PipeSource::PipeSource(std::string command, const PipeOptions& options)
    : command_(std::move(command)), name_("pipe:" + command_), options_(options) {}

PipeSource::~PipeSource() {
  kill_and_reap();
  close_fd(out_fd_);
  close_fd(err_fd_);
}

Expected<std::unique_ptr<PipeSource>> PipeSource::open(const std::string& command, const PipeOptions& options) {
  if (command.find_first_not_of(" \t\r\n") == std::string::npos)
    return invalid_argument(str("pipe:", command, ": no command after 'pipe:'"));
  std::unique_ptr<PipeSource> source(new PipeSource(command, options));
  VLM_RETURN_IF_ERROR(source->spawn());
  return source;
}

Status PipeSource::spawn() {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
    return io_error(str(name_, ": pipe: ", std::strerror(e)));
  }
  SpawnSetup s;
  // stdin from /dev/null; stdout and stderr onto the pipes (dup2 clears close-on-exec on the copies only).
  s.check(posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0));
  s.check(posix_spawn_file_actions_adddup2(&s.actions, out[1], 1));
  s.check(posix_spawn_file_actions_adddup2(&s.actions, err[1], 2));
  // Its own process group (so the whole pipeline can be signalled), default dispositions and an empty mask, so a
  // parent that ignores SIGPIPE or blocks signals does not pass that on.
  s.check(posix_spawnattr_setflags(&s.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK));
  s.check(posix_spawnattr_setpgroup(&s.attr, 0));
  sigset_t defaults, mask;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGCHLD, SIGALRM, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, sig);
  sigemptyset(&mask);
  s.check(posix_spawnattr_setsigdefault(&s.attr, &defaults));
  s.check(posix_spawnattr_setsigmask(&s.attr, &mask));
  int rc = s.err;
  if (rc == 0) {
    std::string arg0 = "sh", arg1 = "-c";
    char* argv[] = {arg0.data(), arg1.data(), command_.data(), nullptr};
    rc = posix_spawn(&pid_, "/bin/sh", &s.actions, &s.attr, argv, environ);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  if (rc != 0) {
    pid_ = -1;
    close_fd(out_fd_);
    close_fd(err_fd_);
    return io_error(str(name_, ": cannot start /bin/sh: ", std::strerror(rc)));
  }
  for (int fd : {out_fd_, err_fd_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return Status();
}

void PipeSource::drain_stderr() {
  char buf[4096];
  while (err_fd_ >= 0) {
    ssize_t got = ::read(err_fd_, buf, sizeof(buf));
    if (got > 0) {
      stderr_tail_.append(buf, static_cast<size_t>(got));
      if (stderr_tail_.size() > options_.stderr_tail_bytes)
        stderr_tail_.erase(0, stderr_tail_.size() - options_.stderr_tail_bytes);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close_fd(err_fd_);  // EOF or a real error: nothing more to learn from it
  }
}

std::string PipeSource::stderr_last_lines() const {
  std::vector<std::string> lines;
  size_t end = stderr_tail_.size();
  while (end > 0 && static_cast<int>(lines.size()) < options_.stderr_tail_lines) {
    size_t nl = stderr_tail_.rfind('\n', end - 1);
    size_t begin = nl == std::string::npos ? 0 : nl + 1;
    std::string line = stderr_tail_.substr(begin, end - begin);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) lines.insert(lines.begin(), line);
    if (nl == std::string::npos) break;
    end = nl;
  }
  std::string out;
  for (const auto& line : lines) out += (out.empty() ? "" : " | ") + line;
  return out;
}

Status PipeSource::finish() {
  // stdout is closed; the command may still be running (flushing stderr), so wait for it while draining stderr.
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) {
      const int e = errno;
      pid_ = -1;
      return io_error(str(name_, ": waitpid: ", std::strerror(e)));
    }
    pollfd p{err_fd_, POLLIN, 0};
    ::poll(&p, err_fd_ >= 0 ? 1 : 0, 20);
    drain_stderr();
  }
  pid_ = -1;
  drain_stderr();  // what is left; a background grandchild may hold stderr open, so no waiting for its end
  close_fd(err_fd_);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status();
  std::string how = WIFEXITED(status)
                        ? str("exited with status ", WEXITSTATUS(status))
                        : str("was killed by signal ", WTERMSIG(status), " (", sigdescr_np(WTERMSIG(status)), ")");
  const std::string tail = stderr_last_lines();
  return io_error(str(name_, ": the command ", how, " after ", bytes_read_, " bytes of output",
                      tail.empty() ? std::string("; stderr was empty") : "; stderr: " + tail));
}

Expected<size_t> PipeSource::read(void* buf, size_t n) {
  if (!error_.ok()) return error_;
  if (eof_ || n == 0) return size_t{0};
  for (;;) {
    // stdout is non-blocking: read first, and only when it is empty wait on both pipes (draining stderr). A command
    // blocked on a full stderr pipe stops writing stdout, so it always reaches that wait and gets drained.
    ssize_t got = ::read(out_fd_, buf, n);
    if (got > 0) {
      bytes_read_ += static_cast<uint64_t>(got);
      return static_cast<size_t>(got);
    }
    if (got == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      error_ = io_error(str(name_, ": read at offset ", bytes_read_, ": ", std::strerror(errno)));
      return error_;
    }
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
      error_ = io_error(str(name_, ": poll: ", std::strerror(errno)));
      return error_;
    }
    if (fds[1].revents) drain_stderr();
  }
  eof_ = true;
  close_fd(out_fd_);
  error_ = finish();
  if (!error_.ok()) return error_;
  return size_t{0};
}

void PipeSource::kill_and_reap() {
  if (pid_ <= 0) return;
  close_fd(out_fd_);  // a command still writing now gets SIGPIPE as well
  ::kill(-pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.kill_grace_ms);
  int status = 0;
  bool reaped = false;
  while (!reaped) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      reaped = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    pollfd p{err_fd_, POLLIN, 0};
    ::poll(&p, err_fd_ >= 0 ? 1 : 0, 5);
    drain_stderr();
  }
  // SIGKILL whatever is left in the group: the shell if it outlived the grace period, and any member that
  // ignored SIGTERM (the group id cannot be reused while a member lives).
  ::kill(-pid_, SIGKILL);
  while (!reaped) {
    pid_t r = ::waitpid(pid_, &status, 0);
    reaped = r == pid_ || (r < 0 && errno != EINTR);
  }
  pid_ = -1;
}

}  // namespace vlm
