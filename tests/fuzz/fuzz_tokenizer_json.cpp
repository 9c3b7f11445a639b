// Fuzz target: the Hugging Face tokenizer.json loader, then encode/decode of a short text with whatever loaded.
// Malformed or unsupported files must come back as a Status naming the field, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "data/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tok = vlm::Tokenizer::from_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  if (tok.ok()) {
    const std::string text = "Hello w\xc3\xb6rld <image> 123! \xff";
    if (tok->decode(tok->encode(text)).empty() && !tok->encode(text).empty()) {
      // ids that decode to nothing are fine (e.g. a vocabulary of specials); only crashes are findings
    }
  }
  return 0;
}
