// Fuzz target: the streaming tar reader (ustar, GNU long names / base-256 sizes, pax) and the webdataset grouping
// on top of it. Any input must end in a clean end-of-archive or a Status, never a crash, hang or huge allocation.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "data/io/tar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vlm::TarReaderOptions o;
  o.max_member_size = 1u << 20;  // keep allocations bounded: larger members are reported, not read
  o.max_extension_size = 1u << 16;
  vlm::TarReader reader(std::make_unique<vlm::MemorySource>(std::vector<uint8_t>(data, data + size), "fuzz.tar"), o);
  vlm::TarMember m;
  for (int i = 0; i < 4096; ++i) {  // every call consumes >= 512 bytes or ends, so this bound is never the limit
    auto more = reader.next(m);
    if (!more.ok() || !*more) break;
  }
  return 0;
}
