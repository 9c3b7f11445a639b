// Driver for the MPI dedup test (mpi_keep_list_test.sh): `make-data DIR` writes a planted-duplicate dataset of 5
// shards, `run DATA_DIR OUT_DIR` runs the dedup job on it (pHash <= 10, caption Jaccard >= 0.5, rewrite) in
// whatever world it was launched in (dist::make_communicator), `has-mpi` exits 0 when vlm_dist was built with MPI.
#include <cstdio>
#include <cstring>
#include <string>

#include "data/dedup/dedup_job.h"
#include "data/io/shard_spec.h"
#include "dist/communicator.h"
#include "dedup_test_util.h"

int main(int argc, char** argv) {
  using namespace vlm;
  if (argc == 2 && !std::strcmp(argv[1], "has-mpi")) return dist::built_with_mpi() ? 0 : 1;
  if (argc == 3 && !std::strcmp(argv[1], "make-data")) {
    const auto d = testing::write_planted_dataset(argv[2], 5, 150, 12, 2, 23);
    std::printf("wrote %zu samples in %zu shards\n", d.keys.size(), d.shards.size());
    return 0;
  }
  if (argc != 4 || std::strcmp(argv[1], "run")) {
    std::fprintf(stderr, "usage: %s has-mpi | make-data DIR | run DATA_DIR OUT_DIR\n", argv[0]);
    return 2;
  }
  auto launch = dist::launch_info_from_env();
  if (!launch.ok()) {
    std::fprintf(stderr, "error: %s\n", launch.status().to_string().c_str());
    return 1;
  }
  auto world = dist::make_communicator(*launch);
  if (!world.ok()) {
    std::fprintf(stderr, "error: %s\n", world.status().to_string().c_str());
    return 1;
  }
  auto shards = expand_shard_spec(std::string(argv[2]) + "/planted-{000000..000004}.tar");
  if (!shards.ok()) return 1;
  DedupJobOptions o;
  o.shards = *shards;
  o.out_dir = argv[3];
  o.criteria.phash_distance = 10;
  o.criteria.caption_jaccard = 0.5;
  o.threads = 1;
  o.rewrite = true;
  auto summary = run_dedup_job(o, **world);
  if (!summary.ok()) {
    std::fprintf(stderr, "rank %d: error: %s\n", (*world)->rank(), summary.status().to_string().c_str());
    return 1;
  }
  std::printf("rank %d of %d: %llu samples hashed here, %llu shards rewritten here\n", (*world)->rank(),
              (*world)->size(), static_cast<unsigned long long>(summary->rank == 0 ? summary->scan.samples : 0),
              static_cast<unsigned long long>(summary->files.size()));
  if ((*world)->rank() == 0) std::printf("%s", summary->report_text.c_str());
  return 0;
}
