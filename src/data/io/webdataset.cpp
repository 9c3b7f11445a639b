// webdataset sample grouping (see webdataset.h).
#include "data/io/webdataset.h"

#include <algorithm>
#include <cctype>

#include "core/logging.h"

namespace vlm {

const std::vector<uint8_t>* WebDatasetSample::get(const std::string& field) const {
  auto it = fields.find(field);
  return it == fields.end() ? nullptr : &it->second;
}

std::string WebDatasetSample::text(const std::string& field) const {
  const auto* bytes = get(field);
  return bytes ? std::string(bytes->begin(), bytes->end()) : std::string();
}

bool webdataset_split_name(const std::string& name, std::string& key, std::string& field) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base || dot + 1 >= name.size()) return false;
  key = name.substr(0, dot);
  field = name.substr(dot + 1);
  std::transform(field.begin(), field.end(), field.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return true;
}

WebDatasetReader::WebDatasetReader(std::unique_ptr<TarReader> tar) : tar_(std::move(tar)) {
  VLM_CHECK(tar_ != nullptr, "WebDatasetReader needs a tar reader");
}

Expected<std::unique_ptr<WebDatasetReader>> WebDatasetReader::open(const std::string& url, TarReaderOptions options) {
  VLM_ASSIGN_OR_RETURN(auto tar, TarReader::open(url, options));
  return std::make_unique<WebDatasetReader>(std::move(tar));
}

// Makes pending_ the next member that has a key; false at the end of the shard.
Expected<bool> WebDatasetReader::fill_pending() {
  while (!has_pending_) {
    VLM_ASSIGN_OR_RETURN(bool more, tar_->next_entry(pending_));
    if (!more) return false;
    if (webdataset_split_name(pending_.name, pending_key_, pending_field_)) {
      has_pending_ = true;
    } else {
      VLM_DEBUG(tar_->name(), ": ignoring member '", pending_.name, "' (no key.field name)");
    }
  }
  return true;
}

Expected<bool> WebDatasetReader::read_group(WebDatasetSample* sample) {
  VLM_ASSIGN_OR_RETURN(bool more, fill_pending());
  if (!more) return false;
  const std::string key = pending_key_;
  if (sample) {
    sample->shard = tar_->name();
    sample->key = key;
    sample->index_in_shard = samples_consumed_;
    sample->fields.clear();
  }
  std::string duplicate;
  do {
    if (sample && !sample->has(pending_field_)) {
      VLM_RETURN_IF_ERROR(tar_->read_body(sample->fields[pending_field_]));
    } else {
      if (sample) duplicate = pending_field_;
      VLM_RETURN_IF_ERROR(tar_->skip_body());
    }
    has_pending_ = false;
    VLM_ASSIGN_OR_RETURN(more, fill_pending());
  } while (more && pending_key_ == key);
  ++samples_consumed_;
  if (!duplicate.empty())
    return parse_error(str(tar_->name(), ": sample '", key, "': field '", duplicate, "' appears twice"));
  return true;
}

Expected<bool> WebDatasetReader::next(WebDatasetSample& sample) {
  if (failed()) return tar_->status();
  return read_group(&sample);
}

Expected<uint64_t> WebDatasetReader::skip(uint64_t n) {
  if (failed()) return tar_->status();
  uint64_t done = 0;
  while (done < n) {
    VLM_ASSIGN_OR_RETURN(bool more, read_group(nullptr));
    if (!more) break;
    ++done;
  }
  return done;
}

}  // namespace vlm
