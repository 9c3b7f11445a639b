// Content hash (MurmurHash3 against SMHasher's published verification value), pHash (stable under the edits it is
// meant to survive, far apart for different images, flat images), caption MinHash (normalisation, estimate vs exact
// Jaccard, LSH parameter choice), ExactDedupSet under threads, and the packed record format (round trip and every
// kind of malformed buffer).
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "data/dedup/exact_dedup_set.h"
#include "data/dedup/minhash.h"
#include "data/dedup/phash.h"
#include "data/dedup/sample_hashes.h"
#include "data/image/transforms.h"
#include "data/io/content_hash.h"
#include "dedup_test_util.h"

namespace vlm {
namespace {

using testing::photo_like_image;

TEST(ContentHash, MatchesSmhasherVerificationValue) {
  // SMHasher's VerificationTest: hash keys {}, {0}, {0,1}, ... {0..254} with seed 256 - len, hash the 256
  // concatenated 16-byte digests with seed 0; the first 4 bytes (little-endian) are 0x6384BA69 for MurmurHash3_x64_128.
  uint8_t key[256];
  std::vector<uint8_t> digests(256 * 16);
  for (int i = 0; i < 256; ++i) {
    key[i] = static_cast<uint8_t>(i);
    const ImageContentHash h = murmur3_x64_128(key, static_cast<size_t>(i), static_cast<uint32_t>(256 - i));
    for (int b = 0; b < 8; ++b) {
      digests[i * 16 + b] = static_cast<uint8_t>(h.lo >> (8 * b));
      digests[i * 16 + 8 + b] = static_cast<uint8_t>(h.hi >> (8 * b));
    }
  }
  const ImageContentHash final_hash = murmur3_x64_128(digests.data(), digests.size(), 0);
  EXPECT_EQ(static_cast<uint32_t>(final_hash.lo), 0x6384BA69u);
}

TEST(ContentHash, EmptyInputAndHex) {
  const ImageContentHash h = content_hash(std::string_view());
  EXPECT_EQ(h.lo, 0u);  // MurmurHash3 of nothing with seed 0 is all zeros
  EXPECT_EQ(h.hi, 0u);
  EXPECT_EQ(content_hash(std::string_view("abc")).to_hex().size(), 32u);
  EXPECT_NE(content_hash(std::string_view("abc")), content_hash(std::string_view("abd")));
}

TEST(Phash, StableUnderEditsAndFarForDifferentImages) {
  int worst_same = 0, best_different = 64;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Image img = photo_like_image(seed);
    auto decode = [](const std::vector<uint8_t>& b) { return *decode_image(b); };
    const uint64_t base = perceptual_hash(decode(testing::jpeg_bytes(img, 92)));
    const uint64_t edits[] = {
        perceptual_hash(decode(testing::jpeg_bytes(img, 40))),
        perceptual_hash(decode(testing::jpeg_bytes(resize_to(img, 96, 72, ResizeFilter::bilinear), 85))),
        perceptual_hash(decode(testing::jpeg_bytes(resize_to(img, 320, 240, ResizeFilter::bicubic), 85))),
        perceptual_hash(decode(testing::jpeg_bytes(testing::crop_fraction(img, 0.02), 85))),
        perceptual_hash(decode(testing::jpeg_bytes(testing::brightness_shift(img, 20), 85))),
    };
    for (uint64_t e : edits) worst_same = std::max(worst_same, hamming_distance(base, e));
    for (uint64_t other = 0; other < seed; ++other)
      best_different = std::min(best_different, hamming_distance(base, perceptual_hash(photo_like_image(other))));
  }
  // Measured over 400 such images: re-encode / resize / brightness edits <= 10 bits, a 2% crop <= 14; distinct
  // images >= 12 bits apart (99.99% of pairs >= 16).
  EXPECT_LE(worst_same, 14);
  EXPECT_GE(best_different, 12);
  EXPECT_LT(worst_same, best_different + 4);
}

TEST(Phash, FlatImageHashesToZeroAndEncodedPathMatches) {
  Image flat(50, 40);
  std::fill(flat.rgb.begin(), flat.rgb.end(), 123);
  EXPECT_EQ(perceptual_hash(flat), 0u);
  const Image img = photo_like_image(5);
  const auto png = encode_png(img);
  ASSERT_TRUE(png.ok());
  auto h = perceptual_hash_encoded(png->data(), png->size());
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(*h, perceptual_hash(img));
}

TEST(Phash, CorruptBytesAreAnErrorNotACrash) {
  std::vector<uint8_t> jpg = testing::jpeg_bytes(photo_like_image(1), 90);
  jpg.resize(jpg.size() / 3);
  std::vector<uint8_t> junk = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'};
  EXPECT_FALSE(perceptual_hash_encoded(junk.data(), junk.size()).ok());
  EXPECT_FALSE(perceptual_hash_encoded(nullptr, 0).ok());
  // A truncated JPEG may decode partially (libjpeg-turbo pads) or fail; either way no crash and a defined result.
  (void)perceptual_hash_encoded(jpg.data(), jpg.size());
}

TEST(MinHash, NormalisationFoldsCasePunctuationAndSpaces) {
  EXPECT_EQ(normalize_caption_for_dedup("  A Dog,  running!\n"), "a dog running");
  EXPECT_EQ(normalize_caption_for_dedup("!!!"), "");
  EXPECT_EQ(normalize_caption_for_dedup("Café 42"), "café 42");
  EXPECT_TRUE(caption_shingle_hashes("").empty());
  EXPECT_EQ(caption_shingle_hashes("ab").size(), 1u);
  EXPECT_EQ(caption_shingle_hashes("abcdef").size(), 2u);
}

TEST(MinHash, EstimateTracksExactJaccard) {
  const MinHasher hasher(256, 7);
  Philox rng(3, 0);
  double worst = 0;
  for (int t = 0; t < 50; ++t) {
    const std::string a = testing::random_caption(rng);
    const std::string b = t % 2 ? testing::caption_near_duplicate(a, rng) : testing::random_caption(rng);
    std::vector<uint32_t> sa(256), sb(256);
    ASSERT_TRUE(hasher.signature(a, sa.data()));
    ASSERT_TRUE(hasher.signature(b, sb.data()));
    const double exact = shingle_jaccard(caption_shingle_hashes(normalize_caption_for_dedup(a)),
                                         caption_shingle_hashes(normalize_caption_for_dedup(b)));
    worst = std::max(worst, std::fabs(minhash_jaccard(sa.data(), sb.data(), 256) - exact));
  }
  // Standard error <= 0.5 / sqrt(256) = 0.031; 50 pairs stay within 4 standard errors.
  EXPECT_LE(worst, 0.125);
  std::vector<uint32_t> s(16);
  EXPECT_FALSE(hasher.signature(" ,.; ", s.data()));
}

TEST(MinHash, LshParametersPutTheSCurveAtTheThreshold) {
  for (double t : {0.5, 0.7, 0.9}) {
    const LshParams p = lsh_params_for_threshold(t, 128);
    EXPECT_LE(p.bands * p.rows, 128);
    EXPECT_GE(lsh_candidate_probability(t, p), 0.95) << t;
    // One more row per band would miss the recall target: the layout is the most selective that reaches it.
    EXPECT_LT(lsh_candidate_probability(t, {128 / (p.rows + 1), p.rows + 1}), 0.95) << t;
    EXPECT_LT(lsh_candidate_probability(0.1, p), 0.05) << t;  // unrelated captions (J ~ 0.02) rarely collide
  }
}

TEST(ExactDedupSet, ConcurrentInsertsCountEachHashOnce) {
  ExactDedupSet set;
  std::vector<std::thread> threads;
  std::atomic<int> firsts{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (uint64_t i = 0; i < 5000; ++i) firsts += set.insert({fmix64(i), fmix64(i + 1000003)});
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(firsts.load(), 5000);
  EXPECT_EQ(set.size(), 5000u);
  EXPECT_TRUE(set.contains({fmix64(7), fmix64(7 + 1000003)}));
  EXPECT_FALSE(set.contains({1, 2}));
  set.clear();
  EXPECT_EQ(set.size(), 0u);
}

std::vector<SampleHashes> some_records() {
  std::vector<SampleHashes> v(3);
  v[0].shard = 1, v[0].index_in_shard = 5, v[0].key = "a/001", v[0].image = SampleImageState::ok;
  v[0].content = {11, 12}, v[0].phash = 0xabcdef, v[0].has_caption = true, v[0].minhash = {1, 2, 3, 4};
  v[1].key = "b", v[1].image = SampleImageState::bad_image, v[1].image_error = "jpg: truncated";
  v[2].key = "", v[2].image = SampleImageState::no_image;
  return v;
}

TEST(PackedHashes, RoundTrip) {
  ShardScanStats stats;
  stats.samples = 3, stats.shards_read = 2, stats.shards_failed = 1, stats.errors = {"x.tar: broken"};
  const auto bytes = pack_sample_hashes(some_records(), stats);
  std::vector<SampleHashes> back;
  ShardScanStats stats_back;
  ASSERT_TRUE(unpack_sample_hashes(bytes.data(), bytes.size(), back, stats_back).ok());
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].key, "a/001");
  EXPECT_EQ(back[0].minhash, (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_TRUE(back[0].has_caption);
  EXPECT_EQ(back[0].content, (ImageContentHash{11, 12}));
  EXPECT_EQ(back[1].image_error, "jpg: truncated");
  EXPECT_EQ(back[2].image, SampleImageState::no_image);
  EXPECT_EQ(stats_back.shards_failed, 1u);
  EXPECT_EQ(stats_back.errors, stats.errors);
}

TEST(PackedHashes, MalformedBuffersAreParseErrors) {
  const auto good = pack_sample_hashes(some_records(), {});
  std::vector<SampleHashes> out;
  ShardScanStats stats;
  // Every truncation.
  for (size_t n = 0; n < good.size(); ++n) {
    const Status s = unpack_sample_hashes(good.data(), n, out, stats);
    EXPECT_EQ(s.code(), StatusCode::parse_error) << n;
  }
  // Trailing bytes, bad magic, bad image state, absurd record count.
  auto extra = good;
  extra.push_back(0);
  EXPECT_EQ(unpack_sample_hashes(extra.data(), extra.size(), out, stats).code(), StatusCode::parse_error);
  auto magic = good;
  magic[0] ^= 1;
  EXPECT_EQ(unpack_sample_hashes(magic.data(), magic.size(), out, stats).code(), StatusCode::parse_error);
  auto state = pack_sample_hashes({some_records()[2]}, {});
  state[state.size() - 4 - 24 - 4 - 1] = 9;  // the state byte (before error string, hashes, slot count)
  const Status bad_state = unpack_sample_hashes(state.data(), state.size(), out, stats);
  EXPECT_EQ(bad_state.code(), StatusCode::parse_error);
  EXPECT_NE(bad_state.message().find("image state"), std::string::npos) << bad_state.message();
  auto count = pack_sample_hashes({}, {});
  for (int b = 0; b < 8; ++b) count[count.size() - 8 + b] = 0xff;
  EXPECT_EQ(unpack_sample_hashes(count.data(), count.size(), out, stats).code(), StatusCode::parse_error);
}

}  // namespace
}  // namespace vlm
