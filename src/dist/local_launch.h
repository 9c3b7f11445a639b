// `vlm launch`: N ranks of one command on this node, torchrun-style. Each rank gets RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (and loses the rank variables of mpirun, PMI and srun, which
// launch_env.h would otherwise prefer), NCCL_NVLS_ENABLE=0 unless it is set, runs in a process group of its own, and has its stdout and stderr lines
// handed to a sink with its rank. When a rank exits with a non-zero status or is killed by a signal, the others get
// SIGTERM, then SIGKILL after `kill_after_s`; the launch's result names the first rank that failed and how.
// SIGINT / SIGTERM sent to the launcher are passed on to every rank; a launcher killed outright takes its ranks
// with it (PR_SET_PDEATHSIG).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlm::dist {

struct LocalLaunchOptions {
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port of this host
  double kill_after_s = 10;  // SIGTERM to SIGKILL, once one rank failed
  std::vector<std::string> command;  // argv of every rank (searched on PATH)
};

struct LocalLaunchResult {
  int failed_rank = -1;  // the first rank that failed (-1: every rank exited 0)
  int exit_status = 0;   // its exit status, or 0 when it was killed by a signal
  int signal = 0;        // the signal that killed it, or 0
  int master_port = 0;   // the port the ranks were given
  std::string message;   // "rank 1 was killed by signal 9 (SIGKILL)"; empty when every rank exited 0
  double seconds = 0;
  // The exit code for `vlm launch`: 0, the failed rank's status, or 128 + its signal.
  int exit_code() const { return failed_rank < 0 ? 0 : signal != 0 ? 128 + signal : exit_status; }
};

// One line a rank wrote (without its newline; a last line without one is passed too).
using RankLineSink = std::function<void(int rank, bool is_stderr, std::string_view line)>;

Expected<LocalLaunchResult> launch_local(const LocalLaunchOptions& options, const RankLineSink& sink);

}  // namespace vlm::dist
