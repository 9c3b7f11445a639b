// The engine tests' model, prompts and greedy oracle.
#include "engine_fixture.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "infer/prefix_hash.h"
#include "model/generate.h"
#include "model_fixture.h"
#include "testing/test_util.h"

namespace vlm::testing {

infer::EngineOptions small_engine_options() {
  infer::EngineOptions o;
  o.block_size = 4;
  o.kv_memory = 1 << 20;
  o.image_token_id = kImageToken;
  o.check_invariants = true;
  return o;
}

EngineCase make_engine_case(Device device, uint64_t seed, int max_new) {
  ModelConfig c = tiny_config(/*tied=*/true, 0);
  c.text.max_seq_len = 96;
  EngineCase ec;
  ec.max_new = max_new;
  ec.model = std::make_unique<VlmModel>(c, device);
  ec.model->init_weights(seed);
  const int per_image = c.image_tokens();
  const int64_t S = c.vision.image_size;
  std::vector<Tensor> pixels;
  for (int i = 0; i < 3; ++i) pixels.push_back(random_normal({3, S, S}, seed * 10 + static_cast<uint64_t>(i)));
  Philox rng(seed, 7);
  auto text = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) {
      int32_t id = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(c.text.vocab_size)));
      t.push_back(id == kImageToken ? id + 1 : id);
    }
    return t;
  };
  auto image = [&]() { return std::vector<int32_t>(static_cast<size_t>(per_image), kImageToken); };
  auto cat = [](std::vector<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const std::vector<int32_t> system = text(19);  // a shared prefix over several blocks
  struct P {
    std::vector<int32_t> tokens;
    std::vector<int> images;
  };
  std::vector<P> prompts = {
      {text(3), {}},
      {cat({{1}, image(), text(6)}), {0}},
      {cat({system, text(5)}), {}},
      {cat({system, text(9)}), {}},
      {cat({{2}, image(), text(2), image(), text(30)}), {1, 2}},
      {cat({{1}, image(), text(6)}), {0}},  // the same image as prompt 1, other text
      {cat({system, image(), text(4)}), {2}},
      {text(41), {}},
  };
  Tensor batch = Tensor::empty({3, 3, S, S}, DType::f32);
  for (int i = 0; i < 3; ++i) batch.slice(0, i, i + 1).view({3, S, S}).copy_from(pixels[static_cast<size_t>(i)]);
  std::vector<GenerationPrompt> gp;
  for (const P& p : prompts) gp.push_back({p.tokens, p.images});
  GenerateOptions go;
  go.max_new_tokens = max_new;
  ec.expected = generate_greedy(*ec.model, batch, gp, kImageToken, go);
  for (size_t i = 0; i < prompts.size(); ++i) {
    infer::Request r;
    r.id = "p";
    r.id += std::to_string(i);  // (not "p" + ...: GCC 12 warns -Wrestrict there)
    r.prompt = prompts[i].tokens;
    for (int img : prompts[i].images)
      r.images.push_back({pixels[static_cast<size_t>(img)], infer::image_key("image" + std::to_string(img), "tiny")});
    r.sampling.max_tokens = max_new;
    ec.requests.push_back(std::move(r));
  }
  return ec;
}

std::vector<Hypothesis> reference_beam_search(VlmModel& model, const std::vector<int32_t>& prompt, int width,
                                              int max_tokens, float length_penalty) {
  struct Beam {
    std::vector<int32_t> out;
    double score;
  };
  std::vector<Beam> live{{{}, 0.0}};
  std::vector<Hypothesis> done;
  const int64_t V = model.config().text.vocab_size;
  while (true) {
    std::vector<int32_t> tokens, positions, cu{0}, rows;
    int max_len = 0;
    for (const Beam& b : live) {
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), b.out.begin(), b.out.end());
      for (size_t i = 0; i < seq.size(); ++i) {
        tokens.push_back(seq[i]);
        positions.push_back(static_cast<int32_t>(i));
      }
      cu.push_back(static_cast<int32_t>(tokens.size()));
      rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
      max_len = std::max(max_len, static_cast<int>(seq.size()));
    }
    auto t = [&](const std::vector<int32_t>& v) {
      return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(model.device());
    };
    VlmInputs in;
    in.tokens = t(tokens);
    in.positions = t(positions);
    in.cu_seqlens = t(cu);
    in.max_seqlen = max_len;
    Tensor logits = model.logits_at_rows(in, Tensor(), t(rows)).to(Device::cpu());
    struct Cand {
      size_t parent;
      int32_t token;
      double score;
    };
    std::vector<Cand> cands;
    for (size_t b = 0; b < live.size(); ++b) {
      float* row = logits.data<float>() + static_cast<int64_t>(b) * V;
      row[kImageToken] = -std::numeric_limits<float>::infinity();
      const float mx = *std::max_element(row, row + V);
      double z = 0;
      for (int64_t i = 0; i < V; ++i) z += std::exp(static_cast<double>(row[i] - mx));
      std::vector<int32_t> idx(static_cast<size_t>(V));
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t c) { return row[a] > row[c]; });
      for (int i = 0; i < 2 * width; ++i)
        cands.push_back(
            {b, idx[static_cast<size_t>(i)], live[b].score + row[idx[static_cast<size_t>(i)]] - mx - std::log(z)});
    }
    std::stable_sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) {
      if (x.score != y.score) return x.score > y.score;
      if (x.parent != y.parent) return x.parent < y.parent;
      return x.token < y.token;
    });
    std::vector<Cand> chosen;
    for (size_t i = 0; i < cands.size() && static_cast<int>(chosen.size()) < width; ++i) {
      const size_t len = live[cands[i].parent].out.size() + 1;
      if (static_cast<int>(len) >= max_tokens) {
        if (static_cast<int>(i) < width) {
          std::vector<int32_t> toks = live[cands[i].parent].out;
          toks.push_back(cands[i].token);
          done.push_back({cands[i].score / std::pow(static_cast<double>(len), length_penalty), cands[i].score, toks});
        }
        continue;
      }
      chosen.push_back(cands[i]);
    }
    if (static_cast<int>(done.size()) >= width || chosen.empty()) break;
    std::vector<Beam> next;
    for (size_t p = 0; p < live.size(); ++p) {
      std::vector<const Cand*> mine;
      for (const Cand& c : chosen)
        if (c.parent == p) mine.push_back(&c);
      if (mine.empty()) continue;
      for (size_t j = 1; j < mine.size(); ++j) {
        next.push_back(live[p]);
        next.back().out.push_back(mine[j]->token);
        next.back().score = mine[j]->score;
      }
      next.push_back(live[p]);
      next.back().out.push_back(mine[0]->token);
      next.back().score = mine[0]->score;
    }
    live = next;
  }
  std::stable_sort(done.begin(), done.end(),
                   [](const Hypothesis& x, const Hypothesis& y) { return x.normalized > y.normalized; });
  return done;
}

}  // namespace vlm::testing
