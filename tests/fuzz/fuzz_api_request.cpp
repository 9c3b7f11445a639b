// Fuzz target: the OpenAI request bodies `vlm serve` accepts (chat and completions; the first byte picks the
// endpoint). Whatever the bytes, parse_api_request returns a request within its limits whose sampling settings
// validate (with beam search: a width within the limit, n of its best, no sampling settings), or an error with an
// HTTP status and a message whose JSON body parses back; the images of an accepted request go through the image
// pipeline with a small pixel limit (errors, never crashes).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "data/image/image_pipeline.h"
#include "serve/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto endpoint = (data[0] & 1) ? vlm::serve::Endpoint::completion : vlm::serve::Endpoint::chat;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  vlm::serve::RequestLimits limits;
  limits.max_tokens = 512;
  limits.max_image_bytes = 1 << 16;
  limits.max_images = 4;
  vlm::serve::ApiRequest r;
  const vlm::serve::ApiError e = vlm::serve::parse_api_request(endpoint, body, limits, &r);
  if (!e.ok()) {
    if (e.status < 400 || e.status > 599 || e.message.empty()) __builtin_trap();
    const auto j = nlohmann::json::parse(vlm::serve::error_body(e), nullptr, false);
    if (j.is_discarded() || !j.contains("error")) __builtin_trap();
    return 0;
  }
  const vlm::infer::SamplingParams& s = r.sampling;
  if (!s.validate().ok() || s.max_tokens > limits.max_tokens || s.n > limits.max_n) __builtin_trap();
  if (static_cast<int>(r.images.size()) > limits.max_images) __builtin_trap();
  // Beam search: a width within the limit, n of its best, nothing a deterministic search would ignore.
  if (r.use_beam_search && (s.beam_width > limits.max_beam_width || s.n > s.beam_width || s.temperature != 0.f ||
                            !s.stop.empty() || r.logprobs))
    __builtin_trap();
  if (!r.use_beam_search && s.beam_width != 1) __builtin_trap();
  if (endpoint == vlm::serve::Endpoint::chat && (r.messages.empty() || r.messages.back().role != "user"))
    __builtin_trap();
  vlm::ImagePipelineOptions p;
  p.size = 16;
  p.max_pixels = 4096;
  std::vector<float> out(3 * 16 * 16);
  for (const vlm::serve::ApiImage& im : r.images) {
    if (im.bytes.empty() || im.bytes.size() > limits.max_image_bytes) __builtin_trap();
    vlm::Philox rng(0);
    (void)vlm::image_pipeline_run(reinterpret_cast<const uint8_t*>(im.bytes.data()), im.bytes.size(), p, &rng,
                                  out.data());
  }
  return 0;
}
