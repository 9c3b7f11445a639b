// Fuzz target: the rendezvous store's requests (dist/tcp_store.h), as its server reads them from a connection.
// Whatever the bytes, parse_store_request consumes whole requests within the limits, each re-encoding to exactly the
// bytes it consumed, and every shorter prefix of one asks for more rather than misreading it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dist/tcp_store.h"

namespace {
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (;;) {
    vlm::dist::StoreRequest r;
    size_t used = 0;
    const vlm::dist::StoreParse p = vlm::dist::parse_store_request(rest, &r, &used);
    if (p != vlm::dist::StoreParse::ok) break;
    if (used == 0 || used > rest.size()) std::abort();
    if (r.key.size() > vlm::dist::kStoreMaxKey || r.value.size() > vlm::dist::kStoreMaxValue) std::abort();
    if (r.op != 'S' && r.op != 'G' && r.op != 'C') std::abort();
    std::string encoded(1, r.op);
    put_u32(encoded, static_cast<uint32_t>(r.key.size()));
    encoded += r.key;
    if (r.op == 'S') {
      put_u32(encoded, static_cast<uint32_t>(r.value.size()));
      encoded += r.value;
    }
    if (encoded != rest.substr(0, used)) std::abort();
    for (size_t cut : {size_t{1}, used / 2, used - 1}) {
      vlm::dist::StoreRequest partial;
      size_t partial_used = 0;
      if (cut < used && vlm::dist::parse_store_request(rest.substr(0, cut), &partial, &partial_used) !=
                            vlm::dist::StoreParse::need_more)
        std::abort();
    }
    rest.remove_prefix(used);
  }
  return 0;
}
