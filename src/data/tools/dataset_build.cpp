// Shards from folders / CSV / JSONL (see dataset_build.h).
#include "data/tools/dataset_build.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/safetensors.h"
#include "core/thread_pool.h"
#include "data/image/image.h"
#include "data/image/transforms.h"
#include "data/io/tar.h"

namespace vlm {
namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_image_file(const fs::path& p) {
  const std::string e = lower(p.extension().string());
  return e == ".jpg" || e == ".jpeg" || e == ".png" || e == ".webp";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// One CSV record (RFC 4180: quoted fields, "" escapes, newlines inside quotes). False at end of input.
bool read_csv_record(std::istream& in, std::vector<std::string>& fields, int* lines) {
  fields.clear();
  std::string field;
  bool quoted = false, any = false;
  int c;
  while ((c = in.get()) != EOF) {
    any = true;
    if (quoted) {
      if (c == '"') {
        if (in.peek() == '"') {
          field.push_back('"');
          in.get();
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++*lines;
        field.push_back(static_cast<char>(c));
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(field);
      field.clear();
    } else if (c == '\n') {
      ++*lines;
      break;
    } else if (c != '\r') {
      field.push_back(static_cast<char>(c));
    }
  }
  if (!any) return false;
  fields.push_back(field);
  return true;
}

int pick_column(const std::vector<std::string>& header, const std::string& wanted,
                std::initializer_list<const char*> defaults) {
  for (size_t i = 0; i < header.size(); ++i) {
    const std::string h = lower(header[i]);
    if (!wanted.empty() ? h == lower(wanted) : std::any_of(defaults.begin(), defaults.end(), [&](const char* d) {
          return h == d;
        }))
      return static_cast<int>(i);
  }
  return -1;
}

std::string resolve(const fs::path& base, const std::string& p) {
  fs::path path(p);
  return path.is_absolute() ? path.string() : (base / path).lexically_normal().string();
}

}  // namespace

Expected<std::vector<BuildInput>> list_build_inputs(const std::string& source, const std::string& image_column,
                                                    const std::string& caption_column) {
  std::error_code ec;
  std::vector<BuildInput> out;
  if (fs::is_directory(source, ec)) {
    std::vector<fs::path> images;
    for (auto it = fs::recursive_directory_iterator(source, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_regular_file() && is_image_file(it->path())) images.push_back(it->path());
    if (ec) return io_error(source + ": " + ec.message());
    std::sort(images.begin(), images.end());
    for (const auto& p : images) {
      fs::path txt = p;
      txt.replace_extension(".txt");
      out.push_back({p.string(), fs::exists(txt) ? read_text(txt) : std::string(), ""});
    }
    return out;
  }
  std::ifstream in(source, std::ios::binary);
  if (!in) return io_error(source + ": cannot open (expected a folder, a .csv or a .jsonl file)");
  const fs::path base = fs::path(source).parent_path();
  const std::string ext = lower(fs::path(source).extension().string());
  if (ext == ".csv") {
    std::vector<std::string> header, row;
    int lines = 0;
    if (!read_csv_record(in, header, &lines)) return parse_error(source + ": empty CSV");
    const int ic = pick_column(header, image_column, {"image", "filepath", "file", "path", "image_path"});
    const int cc = pick_column(header, caption_column, {"caption", "text", "title"});
    if (ic < 0) return parse_error(source + ": no image column (name it with --image-column)");
    while (read_csv_record(in, row, &lines)) {
      if (row.size() == 1 && row[0].empty()) continue;
      if (row.size() != header.size())
        return parse_error(str(source, ":", lines, ": ", row.size(), " fields, the header has ", header.size()));
      nlohmann::json extra = nlohmann::json::object();
      for (size_t i = 0; i < header.size(); ++i)
        if (static_cast<int>(i) != ic && static_cast<int>(i) != cc) extra[header[i]] = row[i];
      out.push_back({resolve(base, row[static_cast<size_t>(ic)]), cc >= 0 ? row[static_cast<size_t>(cc)] : "",
                     extra.empty() ? "" : extra.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
    }
    return out;
  }
  if (ext == ".jsonl" || ext == ".json") {
    std::string line;
    int lineno = 0;
    const std::string ikey = image_column.empty() ? "" : image_column, ckey = caption_column;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) return parse_error(str(source, ":", lineno, ": not a JSON object"));
      std::string image_key = ikey, caption_key = ckey;
      if (image_key.empty())
        for (const char* k : {"image", "filepath", "file", "path", "image_path"})
          if (j.contains(k)) {
            image_key = k;
            break;
          }
      if (caption_key.empty())
        for (const char* k : {"caption", "text", "title"})
          if (j.contains(k)) {
            caption_key = k;
            break;
          }
      if (image_key.empty() || !j.contains(image_key) || !j[image_key].is_string())
        return parse_error(str(source, ":", lineno, ": no image path field (name it with --image-column)"));
      BuildInput b;
      b.image_path = resolve(base, j[image_key].get<std::string>());
      if (!caption_key.empty() && j.contains(caption_key) && j[caption_key].is_string())
        b.caption = j[caption_key].get<std::string>();
      j.erase(image_key);
      if (!caption_key.empty()) j.erase(caption_key);
      if (!j.empty()) b.extra_json = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out.push_back(std::move(b));
    }
    return out;
  }
  return invalid_argument(source + ": expected a folder, a .csv or a .jsonl file");
}

std::string BuildReport::to_json() const {
  nlohmann::json j = {{"inputs", inputs}, {"written", written}, {"failed", failed},
                      {"shards", shards}, {"bytes", bytes},     {"failures", failures}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

struct Encoded {
  Status status;
  std::vector<uint8_t> bytes;
  std::string ext;
  int width = 0, height = 0;
};

Encoded encode_one(const BuildInput& in, const BuildOptions& o) {
  Encoded e;
  auto bytes = read_file_bytes(in.image_path);
  if (!bytes.ok()) {
    e.status = bytes.status();
    return e;
  }
  auto info = read_image_info(bytes->data(), bytes->size());
  if (!info.ok()) {
    e.status = info.status().with_context(in.image_path);
    return e;
  }
  if (static_cast<uint64_t>(info->width) * static_cast<uint64_t>(info->height) > o.max_pixels) {
    e.status = invalid_argument(str(in.image_path, ": ", info->width, "x", info->height, " exceeds the pixel limit"));
    return e;
  }
  e.width = info->width;
  e.height = info->height;
  const bool shrink = o.max_side > 0 && std::max(info->width, info->height) > o.max_side;
  if (!shrink) {
    // Keep the original bytes, but always decode once: a header alone does not prove the image is whole.
    auto img = decode_image(*bytes, "", ImageDecodeOptions{o.max_pixels});
    if (!img.ok()) {
      e.status = img.status().with_context(in.image_path);
      return e;
    }
    e.bytes = std::move(*bytes);
    e.ext = info->format == ImageFormat::png ? "png" : info->format == ImageFormat::webp ? "webp" : "jpg";
    return e;
  }
  auto img = decode_image(*bytes, "", ImageDecodeOptions{o.max_pixels});
  if (!img.ok()) {
    e.status = img.status().with_context(in.image_path);
    return e;
  }
  const double k = static_cast<double>(o.max_side) / std::max(img->width, img->height);
  const int w = std::max(1, static_cast<int>(img->width * k + 0.5)), h = std::max(1, static_cast<int>(img->height * k + 0.5));
  Image small = resize_to(*img, w, h, ResizeFilter::bicubic);
  auto jpg = encode_jpeg(small, o.jpeg_quality);
  if (!jpg.ok()) {
    e.status = jpg.status().with_context(in.image_path);
    return e;
  }
  e.bytes = std::move(*jpg);
  e.ext = "jpg";
  e.width = w;
  e.height = h;
  return e;
}

std::string key_of(uint64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%09llu", static_cast<unsigned long long>(index));
  return buf;
}

}  // namespace

Expected<BuildReport> build_shards(const std::vector<BuildInput>& inputs, const BuildOptions& o,
                                   const std::function<void(uint64_t, uint64_t)>& progress) {
  if (o.out_dir.empty()) return invalid_argument("build: no output folder");
  if (o.samples_per_shard == 0) return invalid_argument("build: samples_per_shard must be > 0");
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return io_error(o.out_dir + ": " + ec.message());
  BuildReport r;
  r.inputs = inputs.size();
  ThreadPool pool(std::max(0, o.threads));
  const size_t chunk = 64;  // images encoded in parallel, then written in input order
  std::unique_ptr<TarWriter> writer;
  uint64_t in_shard = 0, shard_inputs = 0, shard_failed = 0;
  auto close_shard = [&]() -> Status {
    if (!writer) return Status();
    VLM_RETURN_IF_ERROR(writer->close());
    const std::string stats = nlohmann::json({{"count", shard_inputs},
                                              {"successes", in_shard},
                                              {"failed_to_load", shard_failed}}).dump(2) + "\n";
    char name[32];
    std::snprintf(name, sizeof(name), "%05llu", static_cast<unsigned long long>(r.shards - 1));
    VLM_RETURN_IF_ERROR(write_file_atomic(o.out_dir + "/" + name + "_stats.json", stats.data(), stats.size()));
    writer.reset();
    in_shard = shard_inputs = shard_failed = 0;
    return Status();
  };
  for (size_t start = 0; start < inputs.size(); start += chunk) {
    const size_t n = std::min(chunk, inputs.size() - start);
    std::vector<Encoded> enc(n);
    pool.parallel_for(n, [&](size_t i) { enc[i] = encode_one(inputs[start + i], o); });
    for (size_t i = 0; i < n; ++i) {
      const BuildInput& in = inputs[start + i];
      if (!writer) {
        char name[32];
        std::snprintf(name, sizeof(name), "%05llu.tar", static_cast<unsigned long long>(r.shards));
        VLM_ASSIGN_OR_RETURN(writer, TarWriter::create(o.out_dir + "/" + name));
        ++r.shards;
      }
      ++shard_inputs;
      if (!enc[i].status.ok()) {
        ++r.failed;
        ++shard_failed;
        if (r.failures.size() < 20) r.failures.push_back(enc[i].status.message());
      } else {
        const std::string key = key_of(r.written);
        nlohmann::json meta = in.extra_json.empty() ? nlohmann::json::object()
                                                    : nlohmann::json::parse(in.extra_json, nullptr, false);
        if (!meta.is_object()) meta = nlohmann::json::object();
        meta["key"] = key;
        meta["source"] = in.image_path;
        meta["caption"] = in.caption;
        meta["width"] = enc[i].width;
        meta["height"] = enc[i].height;
        const std::string json = meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        VLM_RETURN_IF_ERROR(writer->add(key + "." + enc[i].ext, enc[i].bytes));
        VLM_RETURN_IF_ERROR(writer->add(key + ".txt", std::string_view(in.caption)));
        VLM_RETURN_IF_ERROR(writer->add(key + ".json", std::string_view(json)));
        r.bytes += enc[i].bytes.size();
        ++r.written;
        ++in_shard;
      }
      if (shard_inputs == o.samples_per_shard) VLM_RETURN_IF_ERROR(close_shard());
    }
    if (progress) progress(start + n, inputs.size());
  }
  VLM_RETURN_IF_ERROR(close_shard());
  return r;
}

}  // namespace vlm
