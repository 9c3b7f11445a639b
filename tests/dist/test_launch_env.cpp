// Rank discovery from launcher environments: each launcher's variables, precedence, and malformed values (named in
// the error, never a silent world of one).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "dist/launch_env.h"

namespace vlm::dist {
namespace {

Expected<LaunchInfo> from(const std::map<std::string, std::string>& env) {
  return launch_info_from_env([&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, NoLauncherIsAWorldOfOne) {
  const Expected<LaunchInfo> info = from({{"HOME", "/root"}});
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->size, 1);
  EXPECT_EQ(info->launcher, "none");
  EXPECT_FALSE(info->distributed());
}

TEST(LaunchEnv, EachLauncher) {
  struct Case {
    std::map<std::string, std::string> env;
    const char* launcher;
    int rank, size, local_rank, local_size;
  };
  const Case cases[] = {
      {{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}, "openmpi", 5, 8, 1, 4},
      {{{"PMIX_RANK", "2"}, {"PMI_SIZE", "3"}}, "pmi", 2, 3, 0, 1},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}}, "pmi", 1, 2, 1, 2},
      {{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "2"}},
       "slurm", 3, 4, 1, 2},
      // Uneven nodes: Slurm's "2(x3),1" is not a plain count, so the local size falls back to what is known.
      {{{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS_PER_NODE", "2(x3),1"}},
       "slurm", 6, 7, 0, 1},
      {{{"RANK", "0"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "8"}}, "torchrun", 0, 16, 0, 8},
      // mpirun's own variables win over a RANK a wrapper script left behind.
      {{{"RANK", "9"}, {"WORLD_SIZE", "32"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
       "openmpi", 1, 2, 0, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.launcher);
    const Expected<LaunchInfo> info = from(c.env);
    ASSERT_TRUE(info.ok()) << info.status().message();
    EXPECT_EQ(info->launcher, c.launcher);
    EXPECT_EQ(info->rank, c.rank);
    EXPECT_EQ(info->size, c.size);
    EXPECT_EQ(info->local_rank, c.local_rank);
    EXPECT_EQ(info->local_size, c.local_size);
    EXPECT_EQ(info->distributed(), c.size > 1);
  }
}

TEST(LaunchEnv, MalformedValuesNameTheVariable) {
  struct Case {
    std::map<std::string, std::string> env;
    const char* names;  // the variable the error must name
  };
  const Case cases[] = {
      {{{"RANK", "0"}}, "WORLD_SIZE"},                                             // size missing
      {{{"RANK", "two"}, {"WORLD_SIZE", "4"}}, "RANK"},                            // not a number
      {{{"RANK", "1 "}, {"WORLD_SIZE", "4"}}, "RANK"},                             // trailing space
      {{{"RANK", ""}, {"WORLD_SIZE", "4"}}, "RANK"},                               // empty
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK"},                              // rank == size
      {{{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, "RANK"},                             // negative
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE"},                        // empty world
      {{{"RANK", "0"}, {"WORLD_SIZE", "99999999999999"}}, "WORLD_SIZE"},          // overflows int
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2x"}}, "OMPI_COMM_WORLD_SIZE"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "9"}}, "LOCAL_RANK"},  // beyond the world
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}, "LOCAL_RANK"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "8"}}, "LOCAL_WORLD_SIZE"},  // above the world
      {{{"PMI_RANK", "0"}}, "PMI_SIZE"},
  };
  for (const Case& c : cases) {
    const Expected<LaunchInfo> info = from(c.env);
    ASSERT_FALSE(info.ok()) << "expected an error naming " << c.names;
    EXPECT_EQ(info.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(info.status().message().find(c.names), std::string::npos) << info.status().message();
  }
}

}  // namespace
}  // namespace vlm::dist
