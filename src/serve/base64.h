// Base64 (RFC 4648, standard alphabet; the URL-safe "-_" also accepted) for the images of data: URLs.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace vlm::serve {

// The decoded bytes, or nullopt for input that is not base64: a character outside the alphabet, padding anywhere
// but the end, or a length that leaves a lone 6-bit group. Missing final padding is accepted. Decoding stops with
// nullopt once the output would exceed `max_bytes`.
std::optional<std::string> base64_decode(std::string_view text, size_t max_bytes);
// The size base64_decode would return for well-formed input (for limits checked before decoding).
size_t base64_decoded_size(std::string_view text);
std::string base64_encode(std::string_view bytes);

}  // namespace vlm::serve
