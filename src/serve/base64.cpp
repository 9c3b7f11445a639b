// Base64 decoding and encoding.
#include "serve/base64.h"

#include <array>
#include <cstdint>

namespace vlm::serve {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  t['-'] = 62;
  t['_'] = 63;
  return t;
}
constexpr std::array<int8_t, 256> kTable = make_table();
}  // namespace

size_t base64_decoded_size(std::string_view text) {
  size_t n = text.size();
  while (n > 0 && text[n - 1] == '=') --n;
  return n / 4 * 3 + (n % 4 == 0 ? 0 : n % 4 - 1);
}

std::optional<std::string> base64_decode(std::string_view text, size_t max_bytes) {
  size_t n = text.size();
  size_t pad = 0;
  while (n > 0 && text[n - 1] == '=' && pad < 2) {
    --n;
    ++pad;
  }
  if (pad > 0 && (n + pad) % 4 != 0) return std::nullopt;  // padding must complete a quad
  if (n % 4 == 1) return std::nullopt;                     // a lone 6-bit group encodes no byte
  if (base64_decoded_size(text.substr(0, n)) > max_bytes) return std::nullopt;
  std::string out;
  out.reserve(base64_decoded_size(text.substr(0, n)));
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int8_t v = kTable[static_cast<uint8_t>(text[i])];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<uint8_t>(bytes[i])} << 16) |
                       (uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8) | static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (i + 1 < bytes.size()) v |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace vlm::serve
