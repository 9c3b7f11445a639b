// Reading a model folder's Idefics3 preprocessing and turning one image into its frames and placeholder tokens.
#include "data/loader/idefics3_prompt.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "data/io/webdataset.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFakeToken = "<fake_token_around_image>";
constexpr const char* kGlobalToken = "<global-img>";

// A folder's JSON file, or null when it is absent. Errors: unreadable or malformed JSON, naming the file.
Expected<nlohmann::json> optional_json(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return nlohmann::json();
  VLM_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file_bytes(file.string()));
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return parse_error(file.string() + ": not valid JSON");
  return j;
}

}  // namespace

Expected<std::optional<Idefics3Options>> read_idefics3_preprocessing(const std::string& dir, int image_tokens) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return std::optional<Idefics3Options>();
  const fs::path file = fs::path(dir) / "preprocessor_config.json";
  VLM_ASSIGN_OR_RETURN(nlohmann::json pp, optional_json(file));
  if (!pp.is_object()) return std::optional<Idefics3Options>();
  const auto type = pp.find("image_processor_type");
  if (type == pp.end() || !type->is_string() || type->get<std::string>().find("Idefics3") == std::string::npos)
    return std::optional<Idefics3Options>();
  if (!pp.contains("image_seq_len")) {
    VLM_ASSIGN_OR_RETURN(nlohmann::json proc, optional_json(fs::path(dir) / "processor_config.json"));
    pp["image_seq_len"] = proc.is_object() && proc.contains("image_seq_len") ? proc["image_seq_len"]
                                                                              : nlohmann::json(image_tokens);
  }
  VLM_ASSIGN_OR_RETURN(Idefics3Options o, Idefics3Options::from_preprocessor_config(pp, file.string()));
  return std::optional<Idefics3Options>(o);
}

bool has_idefics3_tokens(const Tokenizer& tokenizer) {
  return tokenizer.token_to_id(kFakeToken).has_value() && tokenizer.token_to_id(kGlobalToken).has_value();
}

Status check_idefics3_for_model(const Idefics3Options& o, int image_size, int image_tokens,
                                const Tokenizer& tokenizer) {
  if (o.image_seq_len != image_tokens)
    return invalid_argument("Idefics3 preprocessing: image_seq_len " + std::to_string(o.image_seq_len) +
                            " differs from the model's " + std::to_string(image_tokens) + " tokens per image");
  if (o.max_image_size != image_size)
    return invalid_argument("Idefics3 preprocessing: max_image_size " + std::to_string(o.max_image_size) +
                            " differs from the vision tower's input size " + std::to_string(image_size));
  for (const char* t : {kFakeToken, kGlobalToken})
    if (!tokenizer.token_to_id(t)) return invalid_argument(std::string("the tokenizer lacks Idefics3's '") + t + "'");
  return Status();
}

std::vector<int32_t> idefics3_placeholder(const Tokenizer& tokenizer, const Idefics3Layout& l,
                                          const Idefics3Options& o, const std::string& image_token) {
  std::vector<int32_t> ids = tokenizer.encode(idefics3_image_prompt(l.rows, l.cols, o.image_seq_len, image_token));
  const std::optional<int32_t> image_id = tokenizer.token_to_id(image_token);
  VLM_CHECK(image_id.has_value(), "idefics3_placeholder: the tokenizer has no '", image_token, "'");
  const int64_t frames = static_cast<int64_t>(l.tiles.size()) + 1;
  const auto placeholders = std::count(ids.begin(), ids.end(), *image_id);
  VLM_CHECK(placeholders == frames * o.image_seq_len, "idefics3_placeholder: the prompt holds ", placeholders,
            " image tokens for ", frames, " frames of ", o.image_seq_len);
  return ids;
}

Idefics3Image idefics3_image(const Image& image, const Idefics3Options& o, const Tokenizer& tokenizer,
                             const std::string& image_token) {
  Idefics3Image out;
  out.pixels = idefics3_pixel_values(image, o);
  out.placeholder = idefics3_placeholder(tokenizer, out.pixels.layout, o, image_token);
  return out;
}

Expected<Idefics3Pixels> idefics3_sample_pixels(const WebDatasetSample& sample, const Idefics3Options& o,
                                                uint64_t max_pixels) {
  ImageDecodeOptions decode;
  decode.max_pixels = max_pixels;
  for (const char* field : {"jpg", "jpeg", "png", "webp"}) {
    const auto* bytes = sample.get(field);
    if (!bytes) continue;
    Expected<Image> img = decode_image(bytes->data(), bytes->size(), {}, decode);
    if (!img.ok())
      return img.status().with_context(str(sample.shard, ": sample '", sample.key, "' field '", field, "'"));
    return idefics3_pixel_values(*img, o);
  }
  return not_found(str(sample.shard, ": sample '", sample.key, "' has no jpg/jpeg/png/webp field"));
}

}  // namespace vlm
