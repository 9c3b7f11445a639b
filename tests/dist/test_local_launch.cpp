// `vlm launch`'s spawner with small shell children: every rank's variables and lines, a rank that exits non-zero, one
// killed by SIGKILL, one that ignores SIGTERM, a command that does not exist, and variables of another launch that a
// rank must not inherit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "dist/local_launch.h"

namespace vlm::dist {
namespace {

struct Lines {
  std::vector<std::string> out, err;  // "rank: line"
  RankLineSink sink() {
    return [this](int rank, bool is_stderr, std::string_view line) {
      (is_stderr ? err : out).push_back(std::to_string(rank) + ": " + std::string(line));
    };
  }
  bool has(const std::vector<std::string>& v, const std::string& line) const {
    return std::find(v.begin(), v.end(), line) != v.end();
  }
};

LocalLaunchResult run_shell(int nproc, const std::string& script, Lines& lines, double kill_after_s = 10) {
  LocalLaunchOptions o;
  o.nproc = nproc;
  o.kill_after_s = kill_after_s;
  o.command = {"sh", "-c", script};
  Expected<LocalLaunchResult> r = launch_local(o, lines.sink());
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : LocalLaunchResult{};
}

TEST(LocalLaunch, EveryRankGetsItsVariablesAndItsLinesAreTagged) {
  Lines lines;
  const LocalLaunchResult r = run_shell(
      3, "echo \"r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK lw=$LOCAL_WORLD_SIZE a=$MASTER_ADDR p=$MASTER_PORT\"; "
         "echo warn $RANK >&2; printf 'no newline'",
      lines);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.message, "");
  ASSERT_GT(r.master_port, 0);
  const std::string port = std::to_string(r.master_port);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string k = std::to_string(rank);
    EXPECT_TRUE(lines.has(lines.out, k + ": r=" + k + " w=3 l=" + k + " lw=3 a=127.0.0.1 p=" + port)) << rank;
    EXPECT_TRUE(lines.has(lines.err, k + ": warn " + k)) << rank;
    EXPECT_TRUE(lines.has(lines.out, k + ": no newline")) << rank;  // a last partial line still comes through
  }
  EXPECT_EQ(lines.out.size(), 6u);
}

TEST(LocalLaunch, ARankThatFailsStopsTheOthersAndIsNamed) {
  Lines lines;
  const LocalLaunchResult r = run_shell(3, "if [ $RANK = 2 ]; then sleep 0.2; exit 3; fi; exec sleep 60", lines);
  EXPECT_EQ(r.failed_rank, 2);
  EXPECT_EQ(r.exit_status, 3);
  EXPECT_EQ(r.exit_code(), 3);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_EQ(r.message, "rank 2 exited with status 3; the other 2 ranks were stopped (SIGTERM)");
}

TEST(LocalLaunch, ARankKilledBySigkillIsNamedWithItsSignal) {
  Lines lines;
  const LocalLaunchResult r = run_shell(4, "if [ $RANK = 1 ]; then sleep 0.2; kill -9 $$; fi; exec sleep 60", lines);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.signal, 9);
  EXPECT_EQ(r.exit_code(), 128 + 9);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.message.find("rank 1 was killed by signal 9 (SIGKILL)"), std::string::npos) << r.message;
}

TEST(LocalLaunch, ARankThatIgnoresSigtermIsKilledAfterTheGrace) {
  Lines lines;
  const LocalLaunchResult r =
      run_shell(2, "if [ $RANK = 0 ]; then sleep 0.2; exit 1; fi; trap '' TERM; sleep 60 & wait; sleep 60", lines,
                /*kill_after_s=*/1.0);
  EXPECT_EQ(r.failed_rank, 0);
  EXPECT_LT(r.seconds, 8.0);
  EXPECT_NE(r.message.find("(SIGKILL after 1 s)"), std::string::npos) << r.message;
}

TEST(LocalLaunch, ACommandThatDoesNotExistFailsWithStatus127) {
  LocalLaunchOptions o;
  o.nproc = 2;
  o.command = {"no-such-command-for-vlm-launch"};
  Lines lines;
  const Expected<LocalLaunchResult> r = launch_local(o, lines.sink());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_status, 127);
  ASSERT_FALSE(lines.err.empty());
  EXPECT_NE(lines.err[0].find("cannot run 'no-such-command-for-vlm-launch'"), std::string::npos) << lines.err[0];
}

TEST(LocalLaunch, AnotherLaunchsRankVariablesAreNotInherited) {
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("SLURM_PROCID", "7", 1);
  unsetenv("NCCL_NVLS_ENABLE");
  Lines lines;
  const std::string script = "echo \"[${OMPI_COMM_WORLD_RANK:-}${SLURM_PROCID:-}] $RANK nvls=$NCCL_NVLS_ENABLE\"";
  LocalLaunchResult r = run_shell(1, script, lines);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("SLURM_PROCID");
  EXPECT_EQ(r.exit_code(), 0);
  ASSERT_EQ(lines.out.size(), 1u);
  EXPECT_EQ(lines.out[0], "0: [] 0 nvls=0");  // NVLink multicast off by default
  setenv("NCCL_NVLS_ENABLE", "1", 1);  // the user's choice stands
  r = run_shell(1, script, lines);
  unsetenv("NCCL_NVLS_ENABLE");
  ASSERT_EQ(lines.out.size(), 2u);
  EXPECT_EQ(lines.out[1], "0: [] 0 nvls=1");
}

TEST(LocalLaunch, BadOptionsAreRefused) {
  Lines lines;
  LocalLaunchOptions o;
  o.nproc = 0;
  o.command = {"true"};
  EXPECT_FALSE(launch_local(o, lines.sink()).ok());
  o.nproc = 1;
  o.command.clear();
  EXPECT_FALSE(launch_local(o, lines.sink()).ok());
  o.command = {"true"};
  o.master_port = 70000;
  EXPECT_FALSE(launch_local(o, lines.sink()).ok());
}

}  // namespace
}  // namespace vlm::dist
