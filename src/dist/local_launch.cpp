// Spawning, watching and stopping the ranks of `vlm launch` (see local_launch.h): fork + execvpe with a prepared
// environment, one poll() loop over every rank's stdout and stderr pipes, waitpid(WNOHANG) every 50 ms.
#include "dist/local_launch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace vlm::dist {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_signal = 0;  // a SIGINT / SIGTERM the launcher received
void on_signal(int sig) { g_signal = sig; }

// Launcher variables a rank must not inherit: they would name another launch (launch_env.h prefers them).
bool inherited_rank_variable(const char* entry) {
  static const char* const kDropped[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                         "MASTER_PORT=", "PMIX_RANK=", "PMI_RANK=", "PMI_SIZE=", "SLURM_PROCID=",
                                         "OMPI_COMM_WORLD_"};
  for (const char* d : kDropped)
    if (std::strncmp(entry, d, std::strlen(d)) == 0) return true;
  return false;
}

Expected<int> free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error(str("vlm launch: socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) return io_error(str("vlm launch: cannot find a free port: ", std::strerror(errno)));
  return static_cast<int>(ntohs(addr.sin_port));
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return str(sig, abbrev ? str(" (SIG", abbrev, ")") : std::string());
}

// One rank's process and its two pipes, with the bytes of a line not yet complete.
struct Rank {
  pid_t pid = -1;
  bool alive = false;
  int fd[2] = {-1, -1};  // stdout, stderr read ends (-1 once closed)
  std::string partial[2];
};

}  // namespace

Expected<LocalLaunchResult> launch_local(const LocalLaunchOptions& o, const RankLineSink& sink) {
  if (o.nproc < 1 || o.nproc > 4096)
    return invalid_argument(str("vlm launch: --nproc ", o.nproc, " is not in [1, 4096]"));
  if (o.command.empty()) return invalid_argument("vlm launch: no command to run (vlm launch --nproc N -- COMMAND...)");
  if (o.master_port < 0 || o.master_port > 65535)
    return invalid_argument(str("vlm launch: --master-port ", o.master_port, " is not a TCP port"));
  LocalLaunchResult result;
  result.master_port = o.master_port;
  if (result.master_port == 0) {
    VLM_ASSIGN_OR_RETURN(result.master_port, free_port());
  }

  // Everything the children need is built before the first fork: a child only dup2s, and execs.
  std::vector<char*> argv;
  for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> common;
  for (char** e = environ; *e != nullptr; ++e)
    if (!inherited_rank_variable(*e)) common.emplace_back(*e);
  common.push_back(str("WORLD_SIZE=", o.nproc));
  common.push_back(str("LOCAL_WORLD_SIZE=", o.nproc));
  common.push_back(str("MASTER_ADDR=", o.master_addr));
  common.push_back(str("MASTER_PORT=", result.master_port));
  if (std::getenv("NCCL_NVLS_ENABLE") == nullptr) common.push_back("NCCL_NVLS_ENABLE=0");  // any NCCL in the ranks

  struct sigaction action {}, ignore{}, old_int{}, old_term{}, old_pipe{};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  g_signal = 0;
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  sigaction(SIGPIPE, &ignore, &old_pipe);  // a closed stdout must not end the launcher and orphan the ranks
  const Clock::time_point start = Clock::now();

  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  auto stop_all = [&](int sig) {
    for (const Rank& r : ranks)
      if (r.pid > 0) ::kill(-r.pid, sig);  // the rank's process group: its own children too
  };
  const pid_t launcher = ::getpid();
  Status spawn_error;
  for (int r = 0; r < o.nproc && spawn_error.ok(); ++r) {
    std::vector<std::string> env = common;
    env.push_back(str("RANK=", r));
    env.push_back(str("LOCAL_RANK=", r));
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      spawn_error = io_error(str("vlm launch: pipe: ", std::strerror(errno)));
      break;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      spawn_error = io_error(str("vlm launch: fork: ", std::strerror(errno)));
      break;
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      // A launcher killed outright (SIGKILL) can stop no one: the kernel sends the rank SIGKILL when it goes.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(128 + SIGKILL);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGPIPE, SIG_DFL);  // an ignored signal would stay ignored across exec
      ::execvpe(argv[0], argv.data(), envp.data());
      const std::string why = str("vlm launch: cannot run '", o.command[0], "': ", std::strerror(errno), "\n");
      (void)!::write(STDERR_FILENO, why.data(), why.size());
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so that a kill(-pid) right after fork finds the group
    ::close(out[1]);
    ::close(err[1]);
    Rank& rank = ranks[static_cast<size_t>(r)];
    rank.pid = pid;
    rank.alive = true;
    rank.fd[0] = out[0];
    rank.fd[1] = err[0];
  }
  if (!spawn_error.ok()) stop_all(SIGKILL);

  auto emit = [&](int r, int stream, bool at_end) {
    std::string& buf = ranks[static_cast<size_t>(r)].partial[stream];
    size_t begin = 0;
    for (size_t nl; (nl = buf.find('\n', begin)) != std::string::npos; begin = nl + 1)
      sink(r, stream == 1, std::string_view(buf).substr(begin, nl - begin));
    buf.erase(0, begin);
    if ((at_end && !buf.empty()) || buf.size() > (64u << 10)) {  // a last line without newline; an endless line
      sink(r, stream == 1, buf);
      buf.clear();
    }
  };

  bool stopping = !spawn_error.ok(), killed = false;
  int stopped = 0;  // ranks still running when the first one failed
  Clock::time_point kill_at = Clock::now(), drain_until{};
  bool draining = false;
  std::vector<pollfd> fds;
  std::vector<std::pair<int, int>> owners;  // (rank, stream) of each fds entry
  char buffer[16384];
  for (;;) {
    int alive = 0;
    fds.clear();
    owners.clear();
    for (int r = 0; r < o.nproc; ++r) {
      Rank& rank = ranks[static_cast<size_t>(r)];
      alive += rank.alive;
      for (int s = 0; s < 2; ++s)
        if (rank.fd[s] >= 0) {
          fds.push_back({rank.fd[s], POLLIN, 0});
          owners.emplace_back(r, s);
        }
    }
    if (alive == 0) {
      if (fds.empty()) break;
      if (!draining) {  // every rank is gone; children they left behind may hold a pipe open a little longer
        draining = true;
        drain_until = Clock::now() + std::chrono::seconds(2);
      } else if (Clock::now() > drain_until) {
        break;
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), 50);
    if (ready < 0 && errno != EINTR) break;
    for (size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const auto [r, s] = owners[i];
      Rank& rank = ranks[static_cast<size_t>(r)];
      const ssize_t n = ::read(rank.fd[s], buffer, sizeof buffer);
      if (n > 0) {
        rank.partial[s].append(buffer, static_cast<size_t>(n));
        emit(r, s, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(rank.fd[s]);
        rank.fd[s] = -1;
        emit(r, s, true);
      }
    }
    for (int r = 0; r < o.nproc; ++r) {
      Rank& rank = ranks[static_cast<size_t>(r)];
      if (!rank.alive) continue;
      int status = 0;
      if (::waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
      rank.alive = false;
      const bool failed = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
      if (failed && result.failed_rank < 0 && !stopping) {
        result.failed_rank = r;
        result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
        result.message = result.signal != 0 ? str("rank ", r, " was killed by signal ", signal_text(result.signal))
                                            : str("rank ", r, " exited with status ", result.exit_status);
      }
      if (failed && !stopping) {
        stopping = true;
        for (const Rank& other : ranks) stopped += other.alive;
        stop_all(SIGTERM);
        kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.kill_after_s * 1000));
      }
    }
    if (g_signal != 0 && !stopping) {
      stopping = true;
      stop_all(g_signal);
      kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.kill_after_s * 1000));
    }
    if (stopping && !killed && Clock::now() > kill_at) {
      killed = true;
      stop_all(SIGKILL);
    }
  }
  // Reap whatever a broken poll left, so no rank outlives the launcher.
  for (Rank& r : ranks)
    if (r.alive) {
      ::kill(-r.pid, SIGKILL);
      ::waitpid(r.pid, nullptr, 0);
    }
  for (Rank& r : ranks)
    for (int s = 0; s < 2; ++s)
      if (r.fd[s] >= 0) ::close(r.fd[s]);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!spawn_error.ok()) return spawn_error;
  if (g_signal != 0 && result.failed_rank < 0) {
    result.failed_rank = 0;
    result.signal = g_signal;
    result.message = str("vlm launch received signal ", signal_text(g_signal), " and passed it to every rank");
  }
  if (result.failed_rank >= 0) {
    if (stopped > 0 && g_signal == 0)
      result.message += str("; the other ", stopped, " rank", stopped == 1 ? " was" : "s were", " stopped",
                            killed ? str(" (SIGKILL after ", o.kill_after_s, " s)") : std::string(" (SIGTERM)"));
  }
  return result;
}

}  // namespace vlm::dist
