// TensorBoard event files: every record's framing and both CRCs checked by an independent bit-by-bit CRC-32C, every
// event decoded back (scalars, images, text, histograms, hparams sessions, the resume marker), and malformed input
// to the TFRecord and protobuf readers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/safetensors.h"
#include "testing/test_util.h"
#include "track/config_values.h"
#include "track/proto_wire.h"
#include "track/tensorboard.h"
#include "track/tfrecord.h"

namespace vlm {
namespace {

// CRC-32C bit by bit, straight from the definition (reflected polynomial 0x82f63b78), masked as TensorFlow does.
uint32_t reference_masked_crc(const std::string& bytes) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
  }
  c ^= 0xffffffffu;
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

uint64_t le(const std::string& s, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[pos + i])) << (8 * i);
  return v;
}

// Splits a file into payloads with the reference CRC; fails the test on any framing error.
std::vector<std::string> frames(const std::string& file) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < file.size()) {
    EXPECT_GE(file.size() - pos, 16u) << "record " << out.size();
    if (file.size() - pos < 16) break;
    const uint64_t n = le(file, pos, 8);
    EXPECT_EQ(le(file, pos + 8, 4), reference_masked_crc(file.substr(pos, 8))) << "length CRC, record " << out.size();
    EXPECT_LE(pos + 12 + n + 4, file.size()) << "record " << out.size();
    if (pos + 12 + n + 4 > file.size()) break;
    const std::string payload = file.substr(pos + 12, n);
    EXPECT_EQ(le(file, pos + 12 + n, 4), reference_masked_crc(payload)) << "data CRC, record " << out.size();
    out.push_back(payload);
    pos += 12 + n + 4;
  }
  return out;
}

// A decoded message as field number -> its occurrences.
using Fields = std::multimap<int, proto::Field>;
Fields fields(std::string_view msg) {
  auto f = proto::decode(msg);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  Fields out;
  if (f.ok())
    for (const auto& x : *f) out.emplace(x.number, x);
  return out;
}
const proto::Field& one(const Fields& f, int number) {
  EXPECT_EQ(f.count(number), 1u) << "field " << number;
  static const proto::Field none;
  auto it = f.find(number);
  return it == f.end() ? none : it->second;
}

std::string read_all(const std::string& path) {
  auto bytes = read_file_bytes(path);
  EXPECT_TRUE(bytes.ok());
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  EXPECT_EQ(masked_crc32c("123456789", 9), reference_masked_crc("123456789"));
}

TEST(TensorBoard, EveryRecordIsFramedAndDecodesBack) {
  const std::string dir = testing::scratch_dir("tb_events");
  std::string path;
  {
    auto sink = TensorBoardSink::open(dir + "/tb");
    ASSERT_TRUE(sink.ok()) << sink.status().to_string();
    path = (*sink)->path();
    HParam lr{"train.lr", HParam::Kind::number, 3e-4, "", false};
    HParam dev{"train.device", HParam::Kind::text, 0, "cpu", false};
    HParam det{"train.deterministic", HParam::Kind::boolean, 0, "", true};
    (*sink)->session_start({lr, dev, det});
    MetricRecord r;
    r.step = 7;
    r.add("loss", 2.5).add("lr", 1e-3);
    (*sink)->write(r);
    MetricRecord e;
    e.step = 7;
    e.kind = "eval";
    e.add("eval/vqa/accuracy", 0.75);
    e.images.push_back({"eval/example_0", 2, 1, std::string("\x89PNG fake", 9), "Q: what color? A: red"});
    e.texts.push_back({"eval/examples", "| q | a |\n|---|---|\n| x | y |"});
    e.histograms.push_back({"weights/norm", {1.0, 2.0, 3.0, 4.0, NAN}});
    (*sink)->write(e);
    (*sink)->session_end(true);
  }
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::string file = read_all(path);
  const std::vector<std::string> events = frames(file);
  ASSERT_EQ(events.size(), 5u);
  auto product = read_tfrecords(file, path);  // the product's reader agrees
  ASSERT_TRUE(product.ok()) << product.status().to_string();
  EXPECT_EQ(*product, events);

  // 0: file version.
  Fields e0 = fields(events[0]);
  EXPECT_EQ(one(e0, 3).bytes, "brain.Event:2");
  EXPECT_GT(one(e0, 1).as_double(), 1.7e9);

  // 1: hparams session start.
  Fields e1 = fields(events[1]);
  Fields s1 = fields(one(e1, 5).bytes);
  Fields v1 = fields(one(s1, 1).bytes);
  EXPECT_EQ(one(v1, 1).bytes, "_hparams_/session_start_info");
  Fields meta = fields(one(v1, 9).bytes);
  Fields pd = fields(one(meta, 1).bytes);
  EXPECT_EQ(one(pd, 1).bytes, "hparams");
  Fields hp = fields(one(pd, 2).bytes);
  Fields start = fields(one(hp, 3).bytes);
  std::map<std::string, Fields> hparams;
  for (auto [it, end] = start.equal_range(1); it != end; ++it) {
    Fields entry = fields(it->second.bytes);
    hparams[std::string(one(entry, 1).bytes)] = fields(one(entry, 2).bytes);
  }
  ASSERT_EQ(hparams.size(), 3u);
  EXPECT_DOUBLE_EQ(one(hparams["train.lr"], 2).as_double(), 3e-4);
  EXPECT_EQ(one(hparams["train.device"], 3).bytes, "cpu");
  EXPECT_EQ(one(hparams["train.deterministic"], 4).bits, 1u);
  Fields tensor = fields(one(v1, 8).bytes);
  EXPECT_EQ(one(tensor, 1).bits, 1u);  // DT_FLOAT, empty

  // 2: train scalars, grouped under the kind.
  Fields e2 = fields(events[2]);
  EXPECT_EQ(one(e2, 2).bits, 7u);
  Fields s2 = fields(one(e2, 5).bytes);
  std::map<std::string, float> scalars;
  for (auto [it, end] = s2.equal_range(1); it != end; ++it) {
    Fields v = fields(it->second.bytes);
    scalars[std::string(one(v, 1).bytes)] = one(v, 2).as_float();
  }
  EXPECT_EQ(scalars.size(), 2u);
  EXPECT_FLOAT_EQ(scalars["train/loss"], 2.5f);
  EXPECT_FLOAT_EQ(scalars["train/lr"], 1e-3f);

  // 3: eval scalar (its own group kept), image, text, histogram.
  Fields e3 = fields(events[3]);
  Fields s3 = fields(one(e3, 5).bytes);
  ASSERT_EQ(s3.count(1), 4u);
  std::map<std::string, Fields> values;
  for (auto [it, end] = s3.equal_range(1); it != end; ++it) {
    Fields v = fields(it->second.bytes);
    values[std::string(one(v, 1).bytes)] = v;
  }
  EXPECT_FLOAT_EQ(one(values["eval/vqa/accuracy"], 2).as_float(), 0.75f);
  Fields image = fields(one(values["eval/example_0"], 4).bytes);
  EXPECT_EQ(one(image, 1).bits, 1u);  // height
  EXPECT_EQ(one(image, 2).bits, 2u);  // width
  EXPECT_EQ(one(image, 3).bits, 3u);  // RGB
  EXPECT_EQ(one(image, 4).bytes, std::string("\x89PNG fake", 9));
  EXPECT_EQ(one(fields(one(values["eval/example_0"], 9).bytes), 3).bytes, "Q: what color? A: red");
  Fields text_meta = fields(one(fields(one(values["eval/examples"], 9).bytes), 1).bytes);
  EXPECT_EQ(one(text_meta, 1).bytes, "text");
  Fields text = fields(one(values["eval/examples"], 8).bytes);
  EXPECT_EQ(one(text, 1).bits, 7u);  // DT_STRING
  EXPECT_EQ(one(text, 8).bytes, "| q | a |\n|---|---|\n| x | y |");
  Fields histo = fields(one(values["weights/norm"], 5).bytes);
  EXPECT_DOUBLE_EQ(one(histo, 1).as_double(), 1.0);
  EXPECT_DOUBLE_EQ(one(histo, 2).as_double(), 4.0);
  EXPECT_DOUBLE_EQ(one(histo, 3).as_double(), 4.0);  // the NaN is left out
  EXPECT_DOUBLE_EQ(one(histo, 4).as_double(), 10.0);
  EXPECT_DOUBLE_EQ(one(histo, 5).as_double(), 30.0);
  auto limits = proto::unpack_doubles(one(histo, 6).bytes);
  auto counts = proto::unpack_doubles(one(histo, 7).bytes);
  ASSERT_TRUE(limits.ok() && counts.ok());
  ASSERT_EQ(limits->size(), counts->size());
  EXPECT_DOUBLE_EQ(limits->back(), 4.0);
  double total = 0;
  for (double c : *counts) total += c;
  EXPECT_DOUBLE_EQ(total, 4.0);

  // 4: session end, success.
  Fields v4 = fields(one(fields(one(fields(events[4]), 5).bytes), 1).bytes);
  EXPECT_EQ(one(v4, 1).bytes, "_hparams_/session_end_info");
  Fields end = fields(one(fields(one(fields(one(v4, 9).bytes), 1).bytes), 2).bytes);
  EXPECT_EQ(one(fields(one(end, 4).bytes), 1).bits, 1u);
}

TEST(TensorBoard, AResumedRunMarksTheStepTensorBoardDropsLaterEventsFrom) {
  const std::string dir = testing::scratch_dir("tb_resume");
  auto a = TensorBoardSink::open(dir);
  auto b = TensorBoardSink::open(dir, 30);  // same second: a second file, not an overwrite
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  const std::vector<std::string> events = frames(read_all((*b)->path()));
  ASSERT_EQ(events.size(), 2u);
  Fields e = fields(events[1]);
  EXPECT_EQ(one(e, 2).bits, 31u);
  EXPECT_EQ(one(fields(one(e, 7).bytes), 1).bits, 1u);  // SessionLog START
}

TEST(TfRecordReader, RejectsMalformedFiles) {
  const std::string good = tfrecord_frame("hello") + tfrecord_frame("world");
  ASSERT_TRUE(read_tfrecords(good, "f").ok());
  EXPECT_TRUE(read_tfrecords("", "f").ok());
  auto expect_error = [](const std::string& bytes, const std::string& what) {
    auto r = read_tfrecords(bytes, "events.x");
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find("events.x: record"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  expect_error(good.substr(0, good.size() - 1), "truncated payload");
  expect_error(good + std::string(5, '\0'), "truncated header");
  std::string bad_len = good;
  bad_len[0] ^= 1;
  expect_error(bad_len, "length CRC");
  std::string bad_data = good;
  bad_data[13] ^= 1;
  expect_error(bad_data, "data CRC");
  // A length whose CRC matches but that runs far past the end.
  std::string huge(8, '\xff');
  const uint32_t c = masked_crc32c(huge.data(), 8);
  for (int i = 0; i < 4; ++i) huge.push_back(static_cast<char>((c >> (8 * i)) & 0xff));
  expect_error(huge, "truncated payload");
}

TEST(ProtoReader, RejectsMalformedMessages) {
  proto::Writer w;
  w.varint(1, 300).bytes(2, "abc").double_(3, 1.5).float_(4, 2.5f);
  auto f = proto::decode(w.data());
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 4u);
  EXPECT_EQ((*f)[0].bits, 300u);
  EXPECT_EQ((*f)[1].bytes, "abc");
  EXPECT_EQ((*f)[2].as_double(), 1.5);
  EXPECT_EQ((*f)[3].as_float(), 2.5f);
  for (size_t cut = 1; cut < w.data().size(); ++cut) {  // every truncation inside a field fails
    if (cut != 3 && cut != 8 && cut != 17) {
      EXPECT_FALSE(proto::decode(w.data().substr(0, cut)).ok()) << cut;
    }
  }
  const std::string eleven_byte_varint("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12);
  EXPECT_FALSE(proto::decode(eleven_byte_varint).ok());
  EXPECT_FALSE(proto::decode(std::string("\x12\x05" "ab", 4)).ok());  // length past the end
  EXPECT_FALSE(proto::decode(std::string("\x0b", 1)).ok());           // group start
  EXPECT_FALSE(proto::decode(std::string("\x0e\x00", 2)).ok());       // wire type 6
  EXPECT_FALSE(proto::decode(std::string("\x00\x00", 2)).ok());       // field 0
  EXPECT_FALSE(proto::unpack_doubles("1234567").ok());
}

TEST(ConfigValues, FlattensTheResolvedConfig) {
  auto v = flatten_toml("[train]\nlr = 0.001\nsteps = 20\ndeterministic = false\ndevice = \"cpu\"\n"
                        "freeze = [\"vision\"]\n[model.text]\nhidden = 64\n",
                        "config.toml");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v->size(), 6u);
  std::map<std::string, HParam> m;
  for (const auto& h : *v) m[h.name] = h;
  EXPECT_EQ(m["train.lr"].kind, HParam::Kind::number);
  EXPECT_DOUBLE_EQ(m["train.lr"].number, 0.001);
  EXPECT_EQ(m["train.steps"].to_string(), "20");
  EXPECT_EQ(m["train.deterministic"].kind, HParam::Kind::boolean);
  EXPECT_EQ(m["train.device"].to_string(), "cpu");
  EXPECT_EQ(m["train.freeze"].to_string(), "[ 'vision' ]");
  EXPECT_EQ(m["model.text.hidden"].to_string(), "64");
  auto bad = flatten_toml("[train\nlr = 1\n", "run.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("run.toml:1"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace vlm
