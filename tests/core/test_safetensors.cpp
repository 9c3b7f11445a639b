// safetensors round trip and malformed-input rejection.
#include <gtest/gtest.h>

#include <cstring>

#include "core/safetensors.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

std::shared_ptr<const std::vector<uint8_t>> make_file(const std::string& header, size_t data_bytes) {
  auto v = std::make_shared<std::vector<uint8_t>>(8 + header.size() + data_bytes, 0);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) (*v)[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(v->data() + 8, header.data(), header.size());
  return v;
}

TEST(Safetensors, RoundTrip) {
  std::string dir = vlm::testing::scratch_dir("st_roundtrip");
  Tensor a = vlm::testing::random_normal({3, 5}, 1);
  Tensor b = Tensor::from_vector<int32_t>({1, 2, 3}, {3});
  Tensor c = a.to(DType::bf16);
  Tensor empty = Tensor::empty({0, 4}, DType::f32);
  ASSERT_TRUE(safetensors_save(dir + "/x.safetensors", {{"w.a", a}, {"ids", b}, {"w.bf", c}, {"e", empty}},
                               {{"format", "pt"}})
                  .ok());
  auto f = safetensors_load(dir + "/x.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata.at("format"), "pt");
  EXPECT_TRUE(vlm::testing::all_close(f->tensors.at("w.a"), a, 0, 0));
  EXPECT_EQ(f->tensors.at("ids").dtype(), DType::i32);
  EXPECT_EQ(f->tensors.at("ids").data<int32_t>()[2], 3);
  EXPECT_EQ(f->tensors.at("w.bf").dtype(), DType::bf16);
  EXPECT_EQ(std::memcmp(f->tensors.at("w.bf").raw_data(), c.raw_data(), c.nbytes()), 0);
  EXPECT_EQ(f->tensors.at("e").shape(), Shape({0, 4}));
}

TEST(Safetensors, InvalidUtf8NameIsAnErrorNotACrash) {
  std::string dir = vlm::testing::scratch_dir("st_utf8");
  Status s = safetensors_save(dir + "/x.safetensors", {{std::string("w\xac"), Tensor::zeros({2}, DType::f32)}});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("UTF-8"), std::string::npos) << s.message();
}

TEST(Safetensors, MissingFileIsIoError) {
  auto f = safetensors_load("/nonexistent/dir/model.safetensors");
  EXPECT_EQ(f.status().code(), StatusCode::io_error);
  EXPECT_NE(f.status().message().find("/nonexistent/dir/model.safetensors"), std::string::npos);
}

struct BadCase {
  const char* name;
  std::string header;
  size_t data_bytes;
  const char* expect;
};

TEST(Safetensors, MalformedInputsAreParseErrors) {
  const BadCase cases[] = {
      {"not json", "{nope", 0, "not valid JSON"},
      {"not object", "[1,2]", 0, "not a JSON object"},
      {"missing fields", R"({"a":{"dtype":"F32"}})", 0, "needs dtype"},
      {"bad dtype", R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4, "not supported"},
      {"negative shape", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative"},
      {"out of range", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "outside the data"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "bytes for shape"},
      {"reversed offsets", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4, "outside the data"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
       8, "overlap"},
      {"bad metadata", R"({"__metadata__":{"k":1}})", 0, "not a string"},
      {"huge shape", R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})", 4,
       "too large"},
  };
  for (const auto& c : cases) {
    auto f = safetensors_parse(make_file(c.header, c.data_bytes), "mem.safetensors");
    ASSERT_FALSE(f.ok()) << c.name;
    EXPECT_EQ(f.status().code(), StatusCode::parse_error) << c.name;
    EXPECT_NE(f.status().message().find(c.expect), std::string::npos) << c.name << ": " << f.status().message();
    EXPECT_NE(f.status().message().find("mem.safetensors"), std::string::npos);
  }
}

TEST(Safetensors, TruncatedHeaderLength) {
  auto v = std::make_shared<std::vector<uint8_t>>(5, 0);
  EXPECT_FALSE(safetensors_parse(v, "t").ok());
  auto big = make_file("{}", 0);
  (*std::const_pointer_cast<std::vector<uint8_t>>(big))[0] = 200;  // header length past the end
  auto f = safetensors_parse(big, "t");
  EXPECT_NE(f.status().message().find("past the end"), std::string::npos);
}

}  // namespace
}  // namespace vlm
