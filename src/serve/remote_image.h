// Fetching the http(s) image URLs of a request, for a server started with --allow-remote-images: each through
// libcurl (data/io's HttpSource, one attempt), bounded in bytes and time. Off by default: a server that fetches
// what clients name can be pointed at addresses only it can reach, so enable it on trusted networks only.
#pragma once

#include <cstddef>

#include "serve/api_error.h"
#include "serve/api_request.h"

namespace vlm::serve {

struct RemoteImageOptions {
  size_t max_bytes = size_t{20} << 20;  // an image larger than this is refused (413) without reading the rest
  double timeout_s = 10;                // connecting, and the whole transfer
};

// Fills the bytes of every image of `api` that has a URL. Errors name the image's field: 400 image_fetch_failed
// (unreachable, an HTTP error status), 400 image_fetch_timeout, 413 over max_bytes.
ApiError fetch_remote_images(ApiRequest* api, const RemoteImageOptions& options);

}  // namespace vlm::serve
