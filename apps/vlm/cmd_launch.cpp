// `vlm launch --nproc N [--master-port P] -- COMMAND...`: N ranks of COMMAND on this node, torchrun-style
// (dist/local_launch.h); each output line is prefixed with its rank, and the first rank that fails stops the others.
#include <cstdio>
#include <cstring>

#include "cli.h"
#include "commands.h"
#include "dist/local_launch.h"

namespace vlm::cli {

int cmd_launch(int argc, char** argv, int first) {
  int dashes = argc;
  for (int i = first; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      dashes = i;
      break;
    }
  int64_t nproc = 1, port = 0;
  std::string addr = "127.0.0.1", kill_after = "10";
  Flags f("vlm launch --nproc N [--master-port P] -- COMMAND...",
          "Run N ranks of COMMAND on this node (e.g. `vlm launch --nproc 8 -- vlm train --config run.toml`), as "
          "torchrun does: each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT "
          "(rank 0 serves the rendezvous there; GPU ranks use GPU LOCAL_RANK), and each line it prints is prefixed "
          "with [rank R]. When a rank fails, the others get SIGTERM, then SIGKILL, and vlm launch exits with its "
          "status (128 + N for signal N), naming it. Several nodes: mpirun, srun or a torchrun-style scheduler "
          "(docs/fsdp-launch.md).");
  f.add_int("--nproc", &nproc, "ranks to start on this node (usually one per GPU)");
  f.add_int("--master-port", &port, "rank 0's rendezvous port (0: a free port)");
  f.add_string("--master-addr", &addr, "the address the ranks reach rank 0 at");
  f.add_string("--kill-after", &kill_after, "seconds between SIGTERM and SIGKILL for the ranks left when one fails");
  f.require("--nproc");
  if (int code = parse_command_flags(f, dashes, argv, first, ""); code >= 0) return code;
  if (!f.positional().empty() || dashes + 1 >= argc) {
    std::fprintf(stderr, "error: give the command after --: vlm launch --nproc N -- COMMAND... (see --help)\n");
    return 2;
  }
  dist::LocalLaunchOptions o;
  o.nproc = static_cast<int>(nproc);
  o.master_port = static_cast<int>(port);
  o.master_addr = addr;
  char* end = nullptr;
  o.kill_after_s = std::strtod(kill_after.c_str(), &end);
  if (end == kill_after.c_str() || *end != '\0' || !(o.kill_after_s >= 0)) {
    std::fprintf(stderr, "error: --kill-after: '%s' is not a number of seconds\n", kill_after.c_str());
    return 2;
  }
  if (nproc < 1 || nproc > 4096 || port < 0 || port > 65535) {
    std::fprintf(stderr, "error: --nproc must be in [1, 4096] and --master-port in [0, 65535]\n");
    return 2;
  }
  for (int i = dashes + 1; i < argc; ++i) o.command.emplace_back(argv[i]);
  const Expected<dist::LocalLaunchResult> r =
      dist::launch_local(o, [](int rank, bool is_stderr, std::string_view line) {
        FILE* out = is_stderr ? stderr : stdout;
        std::fprintf(out, "[rank %d] %.*s\n", rank, static_cast<int>(line.size()), line.data());
        std::fflush(out);
      });
  if (!r.ok()) {
    std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
    return 1;
  }
  if (r->failed_rank >= 0) std::fprintf(stderr, "vlm launch: %s\n", r->message.c_str());
  return r->exit_code();
}

}  // namespace vlm::cli
