// The training loader in SmolVLM's Idefics3 mode, with SmolVLM's real tokenizer and chat template, against what
// inference feeds the same model: every sample's token ids start with exactly PromptBuilder's prompt for its image
// and text, its frames are exactly idefics3_pixel_values', it holds (tiles + 1) * image_seq_len image tokens (what
// the model produces embeddings for), and only the caption and its end-of-turn token are trained. Odd images (1 x 1,
// 4000 x 16, 7 x 5) get the processor's layouts; a tiled prompt over max_seq_len is skipped as too_long, and a lower
// longest edge makes it fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/image/image.h"
#include "data/io/tar.h"
#include "data/io/webdataset.h"
#include "data/loader/idefics3_pixels.h"
#include "data/loader/vlm_batch.h"
#include "data/tokenizer/hf_fixtures.h"
#include "infer/prompt_builder.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

constexpr int kTile = 32, kSeqLen = 2;
const char* kPrompt = "Describe the picture.";

Idefics3Options tiling() {
  Idefics3Options o;
  o.longest_edge = 96;
  o.max_image_size = kTile;
  o.image_seq_len = kSeqLen;
  return o;
}

Image picture(int w, int h, int seed) {
  Image img(w, h);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>((i * 7 + seed * 31 + i / 5) % 256);
  return img;
}

struct Sample {
  Image image;
  std::string caption;
};

std::vector<Sample> samples() {
  return {{picture(400, 300, 1), "a wide striped pattern"}, {picture(1, 1, 2), "one pixel"},
          {picture(4000, 16, 3), "a very wide strip"},      {picture(7, 5, 4), "a tiny odd image"},
          {picture(33, 97, 5), "a tall picture"}};
}

std::string png(const Image& img) {
  auto bytes = encode_png(img);
  VLM_CHECK(bytes.ok(), bytes.status().to_string());
  return std::string(bytes->begin(), bytes->end());
}

std::string write_shard(const std::string& dir, const std::vector<Sample>& s) {
  const std::string path = dir + "/s.tar";
  auto w = TarWriter::create(path);
  EXPECT_TRUE(w.ok());
  for (size_t i = 0; i < s.size(); ++i) {
    const std::string key = "s" + std::to_string(i);
    EXPECT_TRUE((*w)->add(key + ".png", png(s[i].image)).ok());
    EXPECT_TRUE((*w)->add(key + ".txt", s[i].caption).ok());
  }
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

struct SmolVlm {
  Tokenizer tok;
  ChatTemplate chat;
};

SmolVlm smolvlm() {
  Expected<Tokenizer> t = Tokenizer::from_json_text(vlm::testing::hf_tokenizer_json("smolvlm"), "smolvlm");
  VLM_CHECK(t.ok(), t.status().to_string());
  Expected<ChatTemplate> c = chat_template_for(vlm::testing::hf_fixture_path("smolvlm"), "");
  VLM_CHECK(c.ok(), c.status().to_string());
  return {std::move(*t), std::move(*c)};
}

VlmDataOptions loader_options(const std::string& shard, const ChatTemplate& chat) {
  VlmDataOptions o;
  o.shards = {shard};
  o.task = "caption";
  o.caption_prompt = kPrompt;
  o.image_size = kTile;
  o.image_tokens = kSeqLen;
  o.max_seq_len = 2048;
  o.epochs = 1;
  o.shuffle_shards = false;
  o.chat = chat;
  o.idefics3 = tiling();
  return o;
}

TEST(Idefics3Loader, SamplesEqualInferencePromptsAndPixels) {
  const SmolVlm m = smolvlm();
  const std::vector<Sample> s = samples();
  const std::string shard = write_shard(testing::scratch_dir("idefics3_loader"), s);
  VlmDataOptions o = loader_options(shard, m.chat);
  o.decode_threads = 2;
  auto loader = VlmBatchLoader::open(o, m.tok);
  ASSERT_TRUE(loader.ok()) << loader.status().to_string();
  auto batch = (*loader)->next_batch(static_cast<int>(s.size()));
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  ASSERT_EQ(batch->n_samples, static_cast<int>(s.size()));
  EXPECT_EQ((*loader)->counters().samples_ok, s.size());

  ImagePipelineOptions pipeline;
  pipeline.size = kTile;
  auto builder = infer::PromptBuilder::create(m.tok, m.chat, kSeqLen, pipeline);
  ASSERT_TRUE(builder.ok()) << builder.status().to_string();
  ASSERT_TRUE(builder->use_idefics3(tiling()).ok());
  const int32_t image_id = builder->image_token_id();

  // The processor's layouts for these sizes (idefics3_layout's arithmetic is checked against transformers).
  const std::vector<std::pair<int, int>> grids = {{3, 3}, {3, 3}, {1, 3}, {3, 3}, {3, 1}};
  const int64_t per_frame = int64_t{3} * kTile * kTile;
  int64_t frame = 0;
  std::set<int32_t> loss_rows(batch->loss_rows.begin(), batch->loss_rows.end());
  for (size_t i = 0; i < s.size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i) + " (" + std::to_string(s[i].image.width) + "x" +
                 std::to_string(s[i].image.height) + ")");
    const int32_t begin = batch->cu_seqlens[i], end = batch->cu_seqlens[i + 1];
    const std::vector<int32_t> tokens(batch->tokens.begin() + begin, batch->tokens.begin() + end);
    auto prepared = builder->prepare_image(png(s[i].image));
    ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
    auto prompt = builder->tokenize({{kPrompt, ""}}, {*prepared});
    ASSERT_TRUE(prompt.ok()) << prompt.status().to_string();
    // The prompt is inference's, token for token; the rest is the caption, its end of turn and the template's
    // newline after it.
    ASSERT_GT(tokens.size(), prompt->size());
    EXPECT_TRUE(std::equal(prompt->begin(), prompt->end(), tokens.begin())) << m.tok.decode(tokens);
    EXPECT_EQ(m.tok.decode(std::vector<int32_t>(tokens.begin() + static_cast<int64_t>(prompt->size()), tokens.end())),
              " " + s[i].caption + "<end_of_utterance>\n");
    EXPECT_EQ(m.tok.decode({tokens.back()}), "\n");
    // Image tokens: one run of image_seq_len per frame, as many frames as the layout has tiles plus one.
    const Idefics3Layout layout = idefics3_layout(s[i].image.height, s[i].image.width, tiling());
    EXPECT_EQ(std::make_pair(layout.rows, layout.cols), grids[i]);
    const int64_t frames = static_cast<int64_t>(layout.tiles.size()) + 1;
    EXPECT_EQ(static_cast<int64_t>(prepared->inputs.size()), frames);
    EXPECT_EQ(std::count(tokens.begin(), tokens.end(), image_id), frames * kSeqLen);
    // Loss only on the caption and its end of turn: row t is trained iff its next token lies past the prompt and
    // is not the final newline.
    const int32_t answer = begin + static_cast<int32_t>(prompt->size());
    for (int32_t t = begin; t + 1 < end; ++t)
      EXPECT_EQ(loss_rows.count(t) == 1, t + 1 >= answer && t + 1 < end - 1) << "row " << t;
    // Pixels: the sample's frames, in order, are exactly idefics3_pixel_values' (and so PromptBuilder's).
    const Idefics3Pixels want = idefics3_pixel_values(s[i].image, tiling());
    ASSERT_EQ(want.frames.dim(0), frames);
    ASSERT_LE((frame + frames) * per_frame, batch->images.numel());
    EXPECT_TRUE(std::equal(want.frames.data<float>(), want.frames.data<float>() + want.frames.numel(),
                           batch->images.data<float>() + frame * per_frame));
    for (int64_t f = 0; f < frames; ++f) {
      const Tensor& in = prepared->inputs[static_cast<size_t>(f)].pixels;
      EXPECT_TRUE(std::equal(in.data<float>(), in.data<float>() + per_frame,
                             batch->images.data<float>() + (frame + f) * per_frame))
          << "frame " << f;
    }
    frame += frames;
  }
  // The model embeds image_tokens rows per image of the batch tensor: exactly the placeholders.
  EXPECT_EQ(batch->images.dim(0), frame);
  EXPECT_EQ(static_cast<int64_t>(batch->image_rows.size()), frame * kSeqLen);
  EXPECT_EQ(batch->loss_rows.size(), batch->loss_targets.size());
}

TEST(Idefics3Loader, TheSlowTwinPacksTheSameBatch) {
  const SmolVlm m = smolvlm();
  const std::vector<Sample> s = samples();
  const std::string shard = write_shard(testing::scratch_dir("idefics3_loader_twin"), s);
  const VlmDataOptions o = loader_options(shard, m.chat);
  auto loader = VlmBatchLoader::open(o, m.tok);
  ASSERT_TRUE(loader.ok()) << loader.status().to_string();
  auto batch = (*loader)->next_batch(static_cast<int>(s.size()));
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  auto reader = WebDatasetReader::open(shard);
  ASSERT_TRUE(reader.ok());
  std::vector<PreparedSample> prepared;
  WebDatasetSample ws;
  for (uint64_t i = 0; i < s.size(); ++i) {
    auto more = (*reader)->next(ws);
    ASSERT_TRUE(more.ok() && *more);
    auto p = prepare_sample(ws, o, i);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    prepared.push_back(std::move(*p));
  }
  auto twin = pack_samples(prepared, m.tok, o, nullptr);
  ASSERT_TRUE(twin.ok()) << twin.status().to_string();
  EXPECT_EQ(twin->tokens, batch->tokens);
  EXPECT_EQ(twin->image_rows, batch->image_rows);
  EXPECT_EQ(twin->loss_rows, batch->loss_rows);
  ASSERT_EQ(twin->images.shape(), batch->images.shape());
  EXPECT_TRUE(std::equal(twin->images.data<float>(), twin->images.data<float>() + twin->images.numel(),
                         batch->images.data<float>()));
}

TEST(Idefics3Loader, ATiledPromptOverMaxSeqLenIsSkippedAndALowerLongestEdgeFits) {
  const SmolVlm m = smolvlm();
  const std::vector<Sample> s = {{picture(400, 300, 1), "stripes"}, {picture(20, 20, 2), "a small square"}};
  const std::string shard = write_shard(testing::scratch_dir("idefics3_loader_long"), s);
  VlmDataOptions o = loader_options(shard, m.chat);
  o.idefics3->image_seq_len = o.image_tokens = 16;  // 10 frames: 160 image tokens; one frame: 16
  o.max_seq_len = 100;
  auto loader = VlmBatchLoader::open(o, m.tok);
  ASSERT_TRUE(loader.ok()) << loader.status().to_string();
  auto batch = (*loader)->next_batch(2);
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  EXPECT_EQ(batch->n_samples, 0);
  EXPECT_EQ((*loader)->counters().too_long, 2u);  // a 20 x 20 image is upscaled to 96 too: 3 x 3 tiles
  EXPECT_EQ(batch->images.dim(0), 0);
  for (bool split : {true, false}) {
    o.idefics3->longest_edge = split ? kTile : 96;  // one tile side: the global image alone
    o.idefics3->do_image_splitting = split;
    loader = VlmBatchLoader::open(o, m.tok);
    ASSERT_TRUE(loader.ok()) << loader.status().to_string();
    batch = (*loader)->next_batch(2);
    ASSERT_TRUE(batch.ok()) << batch.status().to_string();
    EXPECT_EQ(batch->n_samples, 2);
    EXPECT_EQ(batch->images.dim(0), 2);
    EXPECT_EQ(batch->image_rows.size(), 2u * 16);
  }
}

TEST(Idefics3Loader, SettingsThatDisagreeWithTheModelAreErrorsNamingThem) {
  const SmolVlm m = smolvlm();
  const std::string shard = write_shard(testing::scratch_dir("idefics3_loader_bad"), {{picture(40, 30, 1), "x"}});
  VlmDataOptions o = loader_options(shard, m.chat);
  o.image_tokens = 4;
  auto bad = VlmBatchLoader::open(o, m.tok);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("image_seq_len 2"), std::string::npos) << bad.status().message();
  o = loader_options(shard, m.chat);
  o.image_size = 64;
  bad = VlmBatchLoader::open(o, m.tok);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_image_size 32"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace vlm
