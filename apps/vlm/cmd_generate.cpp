// `vlm generate`: text (and images) in, completions out, through the paged-KV engine (src/infer). One prompt from
// the command line (--prompt, --image), or a JSON-lines file of requests (--requests) answered into --out as they
// finish, with a progress line. A request that fails (bad JSON, unreadable or corrupt image, prompt over the
// context) gets an error line; the others go on.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "cli.h"
#include "commands.h"
#include "inference_model.h"
#include "infer/engine.h"
#include "infer/prompt_builder.h"
#include "infer/request_spec.h"
#include "track/progress.h"

namespace vlm::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}

Status parse_float(const std::string& flag, const std::string& text, float* out) {
  if (text.empty()) return Status();
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return invalid_argument(flag + " '" + text + "' is not a number");
  *out = v;
  return Status();
}

}  // namespace

int cmd_generate(int argc, char** argv, int first) {
  std::string prompt, requests_path, out_path;
  std::vector<std::string> images, stops;
  std::string temperature, top_p, min_p, rep, freq, pres, length_penalty;
  int64_t max_tokens = 64, top_k = 0, n = 1, logprobs = -1, beam_width = 1, seed = -1;
  InferenceFlags inference;
  bool quiet = false, capture_graphs = false;
  Flags f("vlm generate MODEL (--prompt TEXT [--image FILE]... | --requests IN.jsonl [--out OUT.jsonl]) [flags]",
          "Generate with a trained model through the paged-KV engine. MODEL is a run directory (its config.toml and "
          "newest checkpoint), a checkpoint folder inside one, or a model folder (Hugging Face or `vlm convert`'s) "
          "with its tokenizer.json; the run's (or folder's) tokenizer and chat template are used.");
  f.add_string("--prompt", &prompt, "the user's text (one request)");
  f.add_multi("--image", &images, "an image for --prompt (repeatable; placeholders come first, in order)");
  f.add_string("--requests", &requests_path, "JSON lines: {\"id\", \"prompt\", \"images\": [...], sampling keys}");
  f.add_string("--out", &out_path, "answers as JSON lines, written as they finish (default: stdout)");
  f.add_int("--max-tokens", &max_tokens, "tokens generated at most per completion");
  f.add_string("--temperature", &temperature, "0 = greedy (default)");
  f.add_int("--top-k", &top_k, "sample from the k most likely tokens (0 = all)");
  f.add_string("--top-p", &top_p, "nucleus sampling mass (1 = off)");
  f.add_string("--min-p", &min_p, "drop tokens below min-p x the top probability (0 = off)");
  f.add_string("--repetition-penalty", &rep, "> 1 discourages tokens already in the prompt or output");
  f.add_string("--frequency-penalty", &freq, "subtracted per earlier occurrence in the output");
  f.add_string("--presence-penalty", &pres, "subtracted once a token is in the output");
  f.add_int("--seed", &seed, "sampling seed (default: per request from a fixed engine seed)");
  f.add_int("--n", &n, "completions per prompt (forked after the prompt, sharing its KV blocks)");
  f.add_int("--beam-width", &beam_width, "beam search of this width (> 1; returns the --n best)");
  f.add_string("--length-penalty", &length_penalty, "beam search ranks by log-probability / length^this (default 1)");
  f.add_multi("--stop", &stops, "stop string (repeatable)");
  f.add_int("--logprobs", &logprobs,
            "log-probabilities in the JSON output: 0 the chosen token's, N also the N most likely (default -1: none)");
  inference.add_to(f);
  f.add_bool("--capture-graphs", &capture_graphs,
             "with --requests on CUDA: capture the decode steps' CUDA graphs for the file's batch sizes and contexts "
             "before the first step (off: each is captured by the first step that needs it)");
  f.add_bool("--quiet", &quiet, "no progress line");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  const std::vector<std::string> pos = f.positional();
  if (pos.size() != 1) return fail(invalid_argument("expected one MODEL argument, got " + std::to_string(pos.size())));
  if (prompt.empty() == requests_path.empty())
    return fail(invalid_argument("give --prompt or --requests (one of them)"));
  if (!requests_path.empty() && !images.empty())
    return fail(invalid_argument("--image goes with --prompt; a requests file lists its images"));
  if (capture_graphs && requests_path.empty())  // one prompt: capturing on first use costs less than up front
    return fail(invalid_argument("--capture-graphs goes with --requests"));

  infer::SamplingParams defaults;
  defaults.max_tokens = static_cast<int>(max_tokens);
  defaults.top_k = static_cast<int>(top_k);
  defaults.n = static_cast<int>(n);
  defaults.logprobs = static_cast<int>(logprobs);
  defaults.beam_width = static_cast<int>(beam_width);
  defaults.stop = stops;
  if (seed >= 0) defaults.seed = static_cast<uint64_t>(seed);
  for (auto [flag, text, target] :
       {std::tuple{"--temperature", &temperature, &defaults.temperature},
        std::tuple{"--top-p", &top_p, &defaults.top_p}, std::tuple{"--min-p", &min_p, &defaults.min_p},
        std::tuple{"--repetition-penalty", &rep, &defaults.repetition_penalty},
        std::tuple{"--frequency-penalty", &freq, &defaults.frequency_penalty},
        std::tuple{"--presence-penalty", &pres, &defaults.presence_penalty},
        std::tuple{"--length-penalty", &length_penalty, &defaults.length_penalty}})
    if (Status s = parse_float(flag, *text, target); !s.ok()) return fail(s);
  if (Status s = defaults.validate(); !s.ok()) return fail(s);
  auto loaded = inference.load_model(pos[0]);
  if (!loaded.ok()) return fail(loaded.status());
  VlmModel& model = *(*loaded)->model;
  const infer::PromptBuilder* builder = (*loaded)->prompts.get();
  auto eo = inference.engine_options(**loaded);
  if (!eo.ok()) return fail(eo.status());
  infer::Engine engine(model, *eo);

  if (!prompt.empty()) {  // one request: the completions' text on stdout
    infer::RequestSpec spec{"prompt", prompt, images, defaults};
    auto request = builder->build(spec);
    if (!request.ok()) return fail(request.status());
    const infer::RequestOutput out = engine.generate({std::move(*request)})[0];
    if (!out.status.ok()) return fail(out.status);
    for (size_t i = 0; i < out.completions.size(); ++i) {
      if (out.completions.size() > 1) std::printf("[%zu] ", i);
      std::printf("%s\n", out.completions[i].text.c_str());
    }
    return 0;
  }

  std::ifstream in(requests_path);
  if (!in) return fail(io_error(requests_path + ": cannot open"));
  FILE* out = out_path.empty() ? stdout : std::fopen(out_path.c_str(), "w");
  if (!out) return fail(io_error(out_path + ": cannot write"));
  auto write = [&](const infer::RequestOutput& r) {
    std::fprintf(out, "%s\n", infer::answer_line(r).c_str());
    std::fflush(out);
  };
  std::vector<infer::Request> requests;
  int64_t errors = 0;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = requests_path + ":" + std::to_string(line_no);
    auto spec = infer::parse_request_line(line, defaults, "line" + std::to_string(line_no), where);
    Expected<infer::Request> request = spec.ok() ? builder->build(*spec) : Expected<infer::Request>(spec.status());
    if (!request.ok()) {
      infer::RequestOutput r;
      r.id = spec.ok() ? spec->id : infer::request_line_id(line, "line" + std::to_string(line_no));
      r.status = request.status();
      write(r);
      ++errors;
      continue;
    }
    requests.push_back(std::move(*request));
  }
  if (capture_graphs && !requests.empty()) {
    // Every batch bucket up to the sequences that can run at once, by the contexts of the decode steps: from the
    // shortest prompt (a prompt served by the prefix cache but its last token) to the longest prompt plus output.
    int64_t seqs = 0, lo = engine.max_context(), hi = 1;
    for (const infer::Request& r : requests) {
      const int64_t len = static_cast<int64_t>(r.prompt.size());
      seqs += std::max(r.sampling.n, r.sampling.beam_width);
      lo = std::min(lo, len);
      hi = std::max(hi, std::min<int64_t>(len + r.sampling.max_tokens - 1, engine.max_context()));
    }
    lo = std::clamp<int64_t>(lo, 1, hi);
    const auto c = engine.capture_decode_graphs(
        infer::decode_batch_buckets(static_cast<int>(std::min<int64_t>(seqs, eo->max_num_seqs))),
        static_cast<int>(lo), static_cast<int>(hi));
    if (!c.ok()) return fail(c.status());
    if (!quiet && model.device().is_cuda())
      std::fprintf(stderr, "generate: %lld decode CUDA graphs captured in %.2f s\n",
                   static_cast<long long>(c->captured), c->seconds);
  }
  ProgressLine progress("generate", requests.size());
  uint64_t done = 0;
  const std::vector<infer::RequestOutput> answers =
      engine.generate(std::move(requests), [&](const infer::RequestOutput& r) {
        write(r);
        errors += !r.status.ok();
        if (!quiet) {
          const infer::EngineStats s = engine.stats();
          progress.update(++done, std::to_string(s.generated_tokens) + " tokens, " + std::to_string(s.preemptions) +
                                      " preemptions");
        }
      });
  const infer::EngineStats s = engine.stats();
  if (!quiet)
    progress.finish(done, std::to_string(s.generated_tokens) + " tokens generated, prefix cache " +
                              std::to_string(s.prefix_hit_tokens) + " tokens hit");
  if (out != stdout) std::fclose(out);
  if (errors > 0)
    std::fprintf(stderr, "%lld request(s) failed (their lines hold the error)\n", static_cast<long long>(errors));
  return errors > 0 ? 1 : 0;
}

}  // namespace vlm::cli
