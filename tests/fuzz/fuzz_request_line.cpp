// Fuzz target: a `vlm generate` request line (JSON). Whatever the bytes, parse_request_line returns a request that
// passes SamplingParams::validate() or an error naming the place; request_line_id never throws.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "infer/request_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto r = vlm::infer::parse_request_line(line, vlm::infer::SamplingParams{}, "fallback", "fuzz:1");
  if (r.ok() && !r->sampling.validate().ok()) std::abort();
  (void)vlm::infer::request_line_id(line, "fallback");
  return 0;
}
