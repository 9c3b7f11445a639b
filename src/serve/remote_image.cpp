// Remote image fetching with byte and time limits.
#include "serve/remote_image.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "data/io/http_source.h"

namespace vlm::serve {

namespace {

ApiError fetch_one(ApiImage& image, const RemoteImageOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  HttpOptions ho;
  ho.max_attempts = 1;
  ho.buffer_size = HttpSource::kMinBufferSize;
  ho.connect_timeout_ms = static_cast<long>(o.timeout_s * 1000);
  ho.low_speed_limit = 1024;  // bytes/s: a transfer slower than this for the whole budget ends
  ho.low_speed_time_s = std::max(1L, static_cast<long>(std::ceil(o.timeout_s)));
  ho.max_redirects = 3;
  auto source = HttpSource::open(image.url, ho);
  if (!source.ok())
    return bad_request(image.param, "the image URL could not be fetched: " + source.status().message(),
                       "image_fetch_failed");
  if ((*source)->total_size() > static_cast<int64_t>(o.max_bytes))
    return too_large(image.param, "the image at the URL is " + std::to_string((*source)->total_size()) +
                                      " bytes, over the limit of " + std::to_string(o.max_bytes));
  std::string bytes;
  std::vector<char> buf(64 << 10);
  for (;;) {
    auto n = (*source)->read(buf.data(), buf.size());
    if (!n.ok())
      return bad_request(image.param, "the image URL could not be fetched: " + n.status().message(),
                         "image_fetch_failed");
    if (*n == 0) break;
    bytes.append(buf.data(), *n);
    if (bytes.size() > o.max_bytes)
      return too_large(image.param,
                       "the image at the URL is over the limit of " + std::to_string(o.max_bytes) + " bytes");
    if (elapsed() > o.timeout_s)
      return bad_request(image.param, "fetching the image URL took over " + std::to_string(o.timeout_s) + " s",
                         "image_fetch_timeout");
  }
  if (bytes.empty()) return bad_request(image.param, "the image URL gave no bytes", "image_fetch_failed");
  image.bytes = std::move(bytes);
  return {};
}

}  // namespace

ApiError fetch_remote_images(ApiRequest* api, const RemoteImageOptions& options) {
  for (ApiImage& image : api->images) {
    if (image.url.empty()) continue;
    if (ApiError e = fetch_one(image, options); !e.ok()) return e;
  }
  return {};
}

}  // namespace vlm::serve
