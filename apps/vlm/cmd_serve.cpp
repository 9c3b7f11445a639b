// `vlm serve MODEL`: an OpenAI-compatible HTTP server (src/serve) over the paged-KV engine. Listens on loopback
// unless told otherwise (and warns when another address has no API key); SIGINT / SIGTERM stop it gracefully:
// no new requests, in-flight ones finish within --shutdown-timeout, the rest are cancelled; a second signal ends
// the process at once.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli.h"
#include "commands.h"
#include "core/logging.h"
#include "inference_model.h"
#include "serve/api_prompt.h"
#include "serve/engine_loop.h"
#include "serve/server.h"

namespace vlm::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

Expected<double> parse_seconds(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0))
    return invalid_argument(flag + " '" + text + "' is not a positive number of seconds");
  return v;
}

}  // namespace

int cmd_serve(int argc, char** argv, int first) {
  // Block the stop signals before any thread exists (OpenMP's, the engine's, the HTTP pool's): one thread takes
  // them with sigwait, so none dies of a signal mid-request.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::string host = "127.0.0.1", api_key, api_key_file, name;
  std::string max_body_text = "32M", max_image_text = "20M", timeout_text = "600", shutdown_text = "30";
  int64_t port = 8000, max_queue = 128, max_tokens = 0, default_max_tokens = 256, max_n = 8, max_images = 8;
  int64_t max_beam_width = 8;
  int64_t seed = 0;
  InferenceFlags inference;
  bool allow_remote_images = false, capture_graphs = false;
  std::string remote_timeout_text = "10";
  Flags f("vlm serve MODEL [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--served-model-name NAME] [flags]",
          "Serve a model over the OpenAI API: POST /v1/chat/completions (text and data: URL images, streaming), "
          "POST /v1/completions, GET /v1/models, GET /health, GET /metrics (Prometheus). MODEL is a run directory, "
          "a checkpoint folder inside one, or a model folder (Hugging Face or `vlm convert`'s). See docs/serve.md.");
  f.add_string("--host", &host, "address to listen on (default loopback; another address should have --api-key)");
  f.add_int("--port", &port, "port to listen on (0: any free port, printed at start)");
  f.add_string("--api-key", &api_key, "require \"Authorization: Bearer KEY\" (all endpoints but /health)");
  f.add_string("--api-key-file", &api_key_file, "read the API key from this file (keeps it out of `ps`)");
  f.add_string("--served-model-name", &name,
               "the model id clients send and /v1/models lists (default: MODEL's folder name)");
  f.add_int("--max-queue", &max_queue, "requests waiting or running at once; more get 429");
  f.add_string("--max-body-bytes", &max_body_text, "largest request body, e.g. 32M (413 above)");
  f.add_string("--max-image-bytes", &max_image_text, "largest encoded image, e.g. 20M (413 above)");
  f.add_int("--max-images", &max_images, "images per request");
  f.add_bool("--allow-remote-images", &allow_remote_images,
             "fetch http(s) image URLs (off: only data: URLs; the server can reach addresses clients cannot)");
  f.add_string("--remote-image-timeout", &remote_timeout_text, "seconds to fetch one remote image");
  f.add_int("--max-tokens", &max_tokens, "largest max_tokens a request may ask (0: the context)");
  f.add_int("--default-max-tokens", &default_max_tokens, "max_tokens of a request that gives none");
  f.add_int("--max-n", &max_n, "largest n (completions per request)");
  f.add_int("--max-beam-width", &max_beam_width,
            "largest beam width of a \"use_beam_search\" request (best_of, or n; at most --max-num-seqs)");
  f.add_string("--request-timeout", &timeout_text, "seconds a request may take before it is cancelled (504)");
  f.add_string("--shutdown-timeout", &shutdown_text, "seconds in-flight requests get to finish on SIGINT/SIGTERM");
  f.add_int("--seed", &seed, "seeds requests that carry none (with their arrival number)");
  f.add_bool("--capture-graphs", &capture_graphs,
             "on CUDA, capture the decode steps' CUDA graphs for every batch up to --max-num-seqs and every context "
             "before listening (off: each is captured by the first step that needs it, milliseconds)");
  inference.add_to(f);
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  const std::vector<std::string> pos = f.positional();
  if (pos.size() != 1) return fail(invalid_argument("expected one MODEL argument, got " + std::to_string(pos.size())));
  if (port < 0 || port > 65535) return fail(invalid_argument("--port must be in 0..65535"));
  if (max_queue < 1 || max_n < 1 || max_beam_width < 1 || max_images < 0 || default_max_tokens < 1)
    return fail(invalid_argument(
        "--max-queue, --max-n, --max-beam-width and --default-max-tokens must be positive, --max-images >= 0"));
  if (!api_key_file.empty()) {
    if (!api_key.empty()) return fail(invalid_argument("give --api-key or --api-key-file, not both"));
    std::ifstream in(api_key_file);
    if (!in) return fail(io_error(api_key_file + ": cannot read the API key"));
    std::getline(in, api_key);
    while (!api_key.empty() && (api_key.back() == '\r' || api_key.back() == ' ')) api_key.pop_back();
    if (api_key.empty()) return fail(invalid_argument(api_key_file + " holds no API key"));
  }
  auto max_body = parse_bytes("--max-body-bytes", max_body_text);
  auto max_image = parse_bytes("--max-image-bytes", max_image_text);
  auto timeout = parse_seconds("--request-timeout", timeout_text);
  auto shutdown_timeout = parse_seconds("--shutdown-timeout", shutdown_text);
  auto remote_timeout = parse_seconds("--remote-image-timeout", remote_timeout_text);
  for (const Status& s : {max_body.status(), max_image.status(), timeout.status(),
                          shutdown_timeout.status(), remote_timeout.status()})
    if (!s.ok()) return fail(s);

  auto loaded = inference.load_model(pos[0]);
  if (!loaded.ok()) return fail(loaded.status());
  InferenceModel& m = **loaded;
  auto engine_options = inference.engine_options(m);
  if (!engine_options.ok()) return fail(engine_options.status());
  infer::EngineOptions eo = std::move(*engine_options);
  eo.seed = static_cast<uint64_t>(seed);
  eo.capture_graphs_at_start = capture_graphs;

  const bool capture_now = capture_graphs && m.model->device().is_cuda();
  if (capture_now) {
    std::fprintf(stderr, "vlm serve: capturing the decode steps' CUDA graphs (--capture-graphs)\n");
    std::fflush(stderr);
  }
  serve::ServeMetrics metrics;
  serve::EngineLoop loop(*m.model, eo, static_cast<int>(max_queue), metrics);
  if (capture_now) {
    const infer::EngineStats started = loop.snapshot().engine;
    std::fprintf(stderr, "vlm serve: %lld decode CUDA graphs captured in %.2f s\n",
                 static_cast<long long>(started.graphs), started.graph_capture_s);
  }
  serve::ApiPromptBuilder prompts(m.tokenizer, *m.prompts, loop.max_context());
  serve::ServerOptions so;
  so.host = host;
  so.port = static_cast<int>(port);
  so.api_key = api_key;
  so.model_name = name.empty() ? m.name : name;
  so.max_body_bytes = static_cast<size_t>(*max_body);
  so.request_timeout_s = *timeout;
  so.limits.max_tokens = static_cast<int>(max_tokens > 0 ? max_tokens : loop.max_context());
  so.limits.default_max_tokens = static_cast<int>(std::min<int64_t>(default_max_tokens, so.limits.max_tokens));
  so.limits.max_n = static_cast<int>(max_n);
  if (max_beam_width > eo.max_num_seqs)
    return fail(invalid_argument("--max-beam-width " + std::to_string(max_beam_width) + " is over the " +
                                 std::to_string(eo.max_num_seqs) + " sequences decoded at once (--max-num-seqs)"));
  so.limits.max_beam_width = static_cast<int>(max_beam_width);
  so.limits.max_images = static_cast<int>(max_images);
  so.limits.max_image_bytes = static_cast<size_t>(*max_image);
  so.limits.allow_remote_images = allow_remote_images;
  so.remote_images.max_bytes = so.limits.max_image_bytes;
  so.remote_images.timeout_s = *remote_timeout;
  serve::Server server(so, loop, prompts, m.tokenizer, metrics);
  if (Status s = server.bind(); !s.ok()) return fail(s);
  if (!is_loopback(host) && api_key.empty())
    std::fprintf(stderr,
                 "warning: listening on %s without --api-key: anyone who can reach this address can use the model\n",
                 host.c_str());
  std::fprintf(stderr, "vlm serve: %s as '%s' on http://%s:%d (context %lld tokens, %lld KV blocks, queue %lld)\n",
               pos[0].c_str(), so.model_name.c_str(), host.c_str(), server.port(),
               static_cast<long long>(loop.max_context()), static_cast<long long>(loop.snapshot().engine.blocks.total),
               static_cast<long long>(max_queue));
  std::fflush(stderr);

  // The HTTP server runs on its own thread; this one waits for the stop signal and then drains.
  std::atomic<bool> stopping{false}, serve_failed{false};
  std::thread http([&] {
    server.serve();
    if (!stopping) {  // listening failed: wake the waiting thread below
      serve_failed = true;
      kill(getpid(), SIGTERM);
    }
  });
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  stopping = true;
  if (serve_failed) {
    http.join();
    loop.stop();
    return fail(io_error("the HTTP server stopped unexpectedly"));
  }
  std::fprintf(stderr, "vlm serve: %s: finishing in-flight requests (up to %g s), then stopping\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", *shutdown_timeout);
  std::thread second([stop_signals] {  // a second signal ends the process at once
    int again = 0;
    while (sigwait(&stop_signals, &again) != 0) {
    }
    std::fprintf(stderr, "vlm serve: second signal, exiting now\n");
    std::_Exit(130);
  });
  second.detach();  // blocked in sigwait until the process exits
  server.shutdown(*shutdown_timeout);
  http.join();
  loop.stop();
  const serve::EngineSnapshot snap = loop.snapshot();
  std::fprintf(stderr, "vlm serve: stopped (%lld tokens generated)\n",
               static_cast<long long>(snap.engine.generated_tokens));
  return 0;
}

}  // namespace vlm::cli
