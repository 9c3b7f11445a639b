// Standalone `bench_data` executable (the same code as `vlm bench data`).
#include "bench/data/bench_data.h"

int main(int argc, char** argv) { return vlm::bench::bench_data_main(argc, argv); }
