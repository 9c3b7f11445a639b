// Fuzz target: Hugging Face config.json -> ModelConfig (every family), then the exported config.json read back.
// Malformed or unsupported configs must come back as a Status naming the key, never a crash; what parses must
// survive its own export.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto info = vlm::hf_parse_config(text, "fuzz/config.json");
  if (!info.ok()) return 0;
  auto out = vlm::hf_config_json(info->config, info->config.image_token_id, "float32");
  if (!out.ok()) return 0;  // e.g. a VLM without an image token id has no Idefics3 spelling
  auto again = vlm::hf_parse_config(*out, "exported/config.json");
  if (!again.ok()) std::abort();  // an exported config must read back
  return 0;
}
