// Standalone `bench_attention` executable (the same code as `vlm bench attention`).
#include "bench/attention/bench_attention.h"

int main(int argc, char** argv) { return vlm::bench::bench_attention_main(argc, argv); }
