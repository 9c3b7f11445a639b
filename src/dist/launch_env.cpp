// Rank discovery from launcher environments (see launch_env.h).
#include "dist/launch_env.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

namespace vlm::dist {
namespace {

struct Launcher {
  const char* name;
  const char* rank;        // the variable whose presence selects this launcher
  const char* alt_rank;    // another name for it (null: none)
  const char* size;
  const char* local_rank;  // null or unset: 0
  const char* local_size;  // null or unset: 1
};

// In order of precedence: mpirun's own variables are the most specific, torchrun's RANK the most generic (and the
// most often left behind by wrapper scripts).
constexpr Launcher kLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", nullptr, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", nullptr},
    {"slurm", "SLURM_PROCID", nullptr, "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"torchrun", "RANK", nullptr, "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

// A whole number in [lo, hi] from variable `name`, or an error naming it. Surrounding spaces are not accepted.
Expected<int> parse_int(const char* name, const char* value, int lo, int hi) {
  const std::string_view text(value);
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return invalid_argument(str("launch environment: ", name, "=\"", text, "\" is not a whole number"));
  if (v < lo || v > hi)
    return invalid_argument(str("launch environment: ", name, "=", v, " is outside [", lo, ", ", hi, "]"));
  return v;
}

}  // namespace

Expected<LaunchInfo> launch_info_from_env(const std::function<const char*(const char*)>& getenv) {
  constexpr int kMaxRanks = 1 << 24;
  for (const Launcher& l : kLaunchers) {
    const char* rank_name = l.rank;
    const char* rank = getenv(l.rank);
    if (rank == nullptr && l.alt_rank != nullptr) {
      rank_name = l.alt_rank;
      rank = getenv(l.alt_rank);
    }
    if (rank == nullptr) continue;
    const char* size = getenv(l.size);
    if (size == nullptr)
      return invalid_argument(str("launch environment: ", rank_name, " is set (", l.name, ") but ", l.size,
                                  " is not: cannot tell the world size"));
    LaunchInfo info;
    info.launcher = l.name;
    VLM_ASSIGN_OR_RETURN(info.size, parse_int(l.size, size, 1, kMaxRanks));
    VLM_ASSIGN_OR_RETURN(info.rank, parse_int(rank_name, rank, 0, info.size - 1));
    if (const char* lr = l.local_rank ? getenv(l.local_rank) : nullptr) {
      VLM_ASSIGN_OR_RETURN(info.local_rank, parse_int(l.local_rank, lr, 0, info.size - 1));
    }
    if (const char* ls = l.local_size ? getenv(l.local_size) : nullptr) {
      // Slurm writes SLURM_NTASKS_PER_NODE as "4" or, for uneven nodes, "4(x2),3": only a plain number is used.
      const Expected<int> n = parse_int(l.local_size, ls, 1, info.size);
      if (n.ok()) {
        info.local_size = *n;
      } else if (std::string_view(l.name) != "slurm") {
        return n.status();
      }
    }
    if (info.local_rank >= info.local_size && info.local_size > 1)
      return invalid_argument(str("launch environment: ", l.local_rank, "=", info.local_rank, " is not below ",
                                  l.local_size, "=", info.local_size));
    info.local_size = std::max(info.local_size, info.local_rank + 1);
    return info;
  }
  return LaunchInfo{};
}

Expected<LaunchInfo> launch_info_from_env() {
  return launch_info_from_env([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace vlm::dist
