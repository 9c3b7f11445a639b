// Hugging Face folders: config.json mapping of every family in both transformers spellings, malformed configs and
// weights (clear errors naming the key, file or tensor), export -> import round trips, nanoVLM's layout, shards,
// strict loading.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/hf_config.h"
#include "model/hf_export.h"
#include "model/hf_weights.h"
#include "model/model_forward.h"
#include "model/model_io.h"
#include "model_fixture.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

const char* kIdefics3 = R"({
  "architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3", "image_token_id": 500,
  "scale_factor": 2, "tie_word_embeddings": false,
  "text_config": {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-05,
    "max_position_embeddings": 256, "hidden_act": "silu", "tie_word_embeddings": true,
    "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}},
  "vision_config": {"model_type": "idefics3_vision", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8, "layer_norm_eps": 1e-06,
    "hidden_act": "gelu_pytorch_tanh"}})";

const char* kQwen2_4x = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 300,
  "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
  "num_key_value_heads": 1, "rope_theta": 1000000.0, "rope_scaling": null, "rms_norm_eps": 1e-06,
  "tie_word_embeddings": true, "use_sliding_window": false, "max_position_embeddings": 128})";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(HfConfig, Idefics3With5xSpellings) {
  auto info = hf_parse_config(kIdefics3, "config.json");
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const ModelConfig& c = info->config;
  EXPECT_EQ(info->family, HfFamily::idefics3);
  EXPECT_EQ(c.model_parts(), ModelParts::vlm);
  EXPECT_EQ(info->image_token_id, 500);
  EXPECT_EQ(c.image_token_id, 500);
  EXPECT_EQ(c.text.vocab_size, 512);
  EXPECT_EQ(c.text.kv_heads, 2);
  EXPECT_FLOAT_EQ(c.text.rope_theta, 100000.f);
  EXPECT_FALSE(c.text.tie_embeddings);  // the top level wins over text_config
  EXPECT_EQ(c.vision.image_size, 32);
  EXPECT_EQ(c.vision.patch_size, 8);
  EXPECT_EQ(c.projector.pixel_shuffle, 2);
  EXPECT_EQ(c.image_tokens(), 4);
}

TEST(HfConfig, Qwen2With4xSpellingsAndLlamaHeadDim) {
  auto q = hf_parse_config(kQwen2_4x, "config.json");
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->config.model_parts(), ModelParts::text);
  EXPECT_TRUE(q->config.text.qkv_bias);
  EXPECT_TRUE(q->config.text.tie_embeddings);
  EXPECT_FLOAT_EQ(q->config.text.rope_theta, 1e6f);
  EXPECT_EQ(q->config.text.max_seq_len, 128);
  std::string llama = replace(replace(kQwen2_4x, "Qwen2ForCausalLM", "LlamaForCausalLM"), "\"use_sliding_window\"",
                              "\"head_dim\": 8, \"use_sliding_window\"");
  auto l = hf_parse_config(llama, "config.json");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_FALSE(l->config.text.qkv_bias);
}

TEST(HfConfig, SiglipAndNanoVlm) {
  auto s = hf_parse_config(R"({"architectures": ["SiglipVisionModel"], "model_type": "siglip_vision_model",
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32,
    "patch_size": 8})", "config.json");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->config.model_parts(), ModelParts::vision);
  auto n = hf_parse_config(R"({"vit_hidden_dim": 32, "vit_inter_dim": 64, "vit_patch_size": 8, "vit_img_size": 32,
    "vit_n_heads": 2, "vit_n_blocks": 2, "vit_ln_eps": 1e-6, "vit_cls_flag": false, "lm_hidden_dim": 64,
    "lm_inter_dim": 128, "lm_rms_eps": 1e-5, "lm_re_base": 100000, "lm_max_position_embeddings": 256,
    "lm_vocab_size": 512, "lm_n_heads": 4, "lm_n_kv_heads": 2, "lm_n_blocks": 2, "lm_attn_scaling": 1.0,
    "lm_tie_weights": true, "mp_pixel_shuffle_factor": 2, "mp_image_token_length": 4})", "config.json");
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->family, HfFamily::nanovlm);
  EXPECT_TRUE(n->config.text.tie_embeddings);
  EXPECT_FLOAT_EQ(n->config.text.rope_theta, 100000.f);
}

// Each malformed or unsupported config is an error whose message names the key.
TEST(HfConfig, UnsupportedSettingsNameTheKey) {
  const std::pair<std::string, std::string> cases[] = {
      {replace(kQwen2_4x, "Qwen2ForCausalLM", "MistralForCausalLM"), "architectures"},
      {replace(kQwen2_4x, "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}"),
       "rope_scaling.rope_type"},
      {replace(kIdefics3, "\"rope_type\": \"default\"", "\"rope_type\": \"llama3\""),
       "text_config.rope_parameters.rope_type"},
      {replace(kQwen2_4x, "\"use_sliding_window\": false", "\"use_sliding_window\": true"), "use_sliding_window"},
      {replace(kQwen2_4x, "\"use_sliding_window\": false",
               "\"layer_types\": [\"full_attention\", \"sliding_attention\"]"), "layer_types[1]"},
      {replace(kQwen2_4x, "\"hidden_size\": 32,", "\"hidden_size\": 32, \"head_dim\": 16,"), "head_dim"},
      {replace(kQwen2_4x, "\"vocab_size\": 300,", ""), "vocab_size"},
      {replace(kQwen2_4x, "\"vocab_size\": 300", "\"vocab_size\": \"300\""), "vocab_size"},
      {replace(kIdefics3, "\"hidden_act\": \"gelu_pytorch_tanh\"", "\"hidden_act\": \"relu\""),
       "vision_config.hidden_act"},
      {replace(kIdefics3, "\"image_token_id\": 500,", ""), "image_token_id"},
      {"{\"architectures\": [", "not valid JSON"},
  };
  for (const auto& [json, key] : cases) {
    auto r = hf_parse_config(json, "dir/config.json");
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().to_string();
    EXPECT_NE(r.status().message().find("dir/config.json"), std::string::npos) << r.status().to_string();
  }
}

TEST(HfFolder, MissingConfigAndWeights) {
  const std::string dir = testing::scratch_dir("hf_missing");
  auto r = load_model_dir(dir, Device::cpu());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.json"), std::string::npos) << r.status().to_string();
  write_text(dir + "/config.json", kQwen2_4x);
  r = load_model_dir(dir, Device::cpu());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.safetensors"), std::string::npos) << r.status().to_string();
}

// A model exported to a Hugging Face folder loads back with the same weights and the same logits.
void expect_round_trip(const ModelConfig& c, const std::string& name, int image_token_id, bool bf16) {
  VlmModel a(c, Device::cpu());
  a.init_weights(7);
  const std::string dir = testing::scratch_dir(name);
  HfExportOptions o;
  o.image_token_id = image_token_id;
  o.bf16 = bf16;
  ASSERT_TRUE(hf_export_model(a, dir, o).ok());
  auto b = load_model_dir(dir, Device::cpu());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const float tol = bf16 ? 1e-2f : 0.f;
  for (const Param& p : a.params().all()) {
    const Param* q = (*b)->params().find(p.name);
    ASSERT_NE(q, nullptr) << p.name;
    EXPECT_TRUE(testing::all_close(q->value, p.value, tol, tol)) << p.name;
  }
}

TEST(HfFolder, ExportImportRoundTripsEveryPart) {
  ModelConfig vlm = testing::tiny_config(/*tied=*/false, 0);
  expect_round_trip(vlm, "hf_rt_vlm", 5, false);
  ModelConfig text = testing::tiny_config(/*tied=*/true, 0);
  text.parts = "text";
  expect_round_trip(text, "hf_rt_text", -1, false);
  ModelConfig qwen = testing::tiny_config(/*tied=*/false, 0);  // qkv bias: exported as Qwen2
  qwen.parts = "text";
  expect_round_trip(qwen, "hf_rt_qwen", -1, true);
  ModelConfig vision = testing::tiny_config(true, 0);
  vision.parts = "vision";
  expect_round_trip(vision, "hf_rt_vision", -1, false);
  // An MLP projector has no Idefics3 equivalent: refused, not silently changed.
  VlmModel mlp(testing::tiny_config(false, 8), Device::cpu());
  HfExportOptions o;
  o.image_token_id = 5;
  EXPECT_FALSE(hf_export_model(mlp, testing::scratch_dir("hf_rt_mlp"), o).ok());
}

// Shards: an index over two files loads; an index naming a missing file, a truncated shard and an integer weight
// are errors naming the file or tensor.
TEST(HfFolder, ShardedIndexAndMalformedShards) {
  ModelConfig c = testing::tiny_config(true, 0);
  c.parts = "text";
  VlmModel a(c, Device::cpu());
  a.init_weights(3);
  const std::string dir = testing::scratch_dir("hf_shards");
  ASSERT_TRUE(hf_export_model(a, dir, {}).ok());
  // No token ids given: an empty object, which transformers' GenerationConfig reads (it fails on "null").
  std::ifstream gen(dir + "/generation_config.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(gen), {}), "{}\n");
  auto file = safetensors_load(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<std::pair<std::string, Tensor>> s1, s2;
  std::string index = "{\"metadata\": {}, \"weight_map\": {";
  int i = 0;
  for (const auto& [name, t] : file->tensors) {
    const bool first = i++ % 2 == 0;
    (first ? s1 : s2).emplace_back(name, t.clone());
    index += std::string(i > 1 ? ", " : "") + "\"" + name + "\": \"" + (first ? "a-00001.safetensors" : "a-00002.safetensors") + "\"";
  }
  index += "}}";
  ASSERT_TRUE(safetensors_save(dir + "/a-00001.safetensors", s1).ok());
  ASSERT_TRUE(safetensors_save(dir + "/a-00002.safetensors", s2).ok());
  std::filesystem::remove(dir + "/model.safetensors");
  write_text(dir + "/model.safetensors.index.json", index);
  auto b = load_model_dir(dir, Device::cpu());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  for (const Param& p : a.params().all())
    EXPECT_TRUE(testing::all_close((*b)->params().find(p.name)->value, p.value, 0, 0)) << p.name;

  // Truncated shard.
  auto bytes = read_file_bytes(dir + "/a-00002.safetensors");
  ASSERT_TRUE(bytes.ok());
  write_text(dir + "/a-00002.safetensors", std::string(bytes->begin(), bytes->begin() + bytes->size() / 2));
  auto r = load_model_dir(dir, Device::cpu());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("a-00002.safetensors"), std::string::npos) << r.status().to_string();
  // Index naming a missing file.
  std::filesystem::remove(dir + "/a-00002.safetensors");
  r = load_model_dir(dir, Device::cpu());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("a-00002.safetensors"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("missing"), std::string::npos) << r.status().to_string();
  // Wrong dtype: an integer tensor where a weight belongs.
  std::vector<std::pair<std::string, Tensor>> bad = s1;
  for (auto& [name, t] : s2) bad.emplace_back(name, t);
  bad[0].second = Tensor::zeros(bad[0].second.shape(), DType::i32);
  std::filesystem::remove(dir + "/model.safetensors.index.json");
  std::filesystem::remove(dir + "/a-00001.safetensors");
  ASSERT_TRUE(safetensors_save(dir + "/model.safetensors", bad).ok());
  r = load_model_dir(dir, Device::cpu());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(bad[0].first), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("i32"), std::string::npos) << r.status().to_string();
}

// Strict loading lists every missing, unexpected and mis-shaped tensor; allow_missing admits named parts.
TEST(HfFolder, StrictLoadingListsEveryProblem) {
  ModelConfig c = testing::tiny_config(true, 0);
  VlmModel a(c, Device::cpu());
  a.init_weights(1);
  std::map<std::string, Tensor> tensors;
  for (const Param& p : a.params().all()) tensors[p.name] = p.value;
  const std::string proj = "model.connector.modality_projection.proj.weight";
  const std::string q = "model.text_model.layers.1.self_attn.q_proj.weight";
  tensors.erase(proj);
  tensors[q] = Tensor::zeros({3, 3}, DType::f32);
  tensors["model.extra.weight"] = Tensor::zeros({2}, DType::f32);
  VlmModel b(c, Device::cpu());
  LoadReport report;
  Status s = load_parameters(b.params(), tensors, {}, "w.safetensors", &report);
  ASSERT_FALSE(s.ok());
  for (const std::string& name : {proj, q, std::string("model.extra.weight"), std::string("w.safetensors")})
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  EXPECT_EQ(report.missing.size(), 1u);
  EXPECT_EQ(report.unexpected.size(), 1u);
  EXPECT_EQ(report.shape.size(), 1u);
  tensors[q] = a.params().find(q)->value;
  tensors.erase("model.extra.weight");
  LoadPolicy allow;
  allow.allow_missing = {"projector"};
  EXPECT_TRUE(load_parameters(b.params(), tensors, allow, "w.safetensors", &report).ok());
  EXPECT_EQ(report.loaded, static_cast<int>(a.params().all().size()) - 1);
  allow.allow_missing = {"model.connector.*"};
  EXPECT_TRUE(load_parameters(b.params(), tensors, allow, "w.safetensors").ok());
}

// nanoVLM's layout (fused ViT qkv, [1, P, D] positions, tied head saved as decoder.head.weight) loads into the same
// model, giving the same logits as the Idefics3-named weights.
TEST(HfFolder, NanoVlmLayoutMatchesIdefics3Names) {
  ModelConfig c = testing::tiny_config(true, 0);
  c.text.qkv_bias = false;
  VlmModel a(c, Device::cpu());
  a.init_weights(11);
  auto get = [&](const std::string& n) { return a.params().find(n)->value.clone(); };
  std::vector<std::pair<std::string, Tensor>> t;
  const std::string v = "model.vision_model.", x = "model.text_model.";
  t.emplace_back("vision_encoder.patch_embedding.conv.weight", get(v + "embeddings.patch_embedding.weight"));
  t.emplace_back("vision_encoder.patch_embedding.conv.bias", get(v + "embeddings.patch_embedding.bias"));
  Tensor pos = get(v + "embeddings.position_embedding.weight");
  t.emplace_back("vision_encoder.patch_embedding.position_embedding", pos.view({1, pos.dim(0), pos.dim(1)}));
  t.emplace_back("vision_encoder.layer_norm.weight", get(v + "post_layernorm.weight"));
  t.emplace_back("vision_encoder.layer_norm.bias", get(v + "post_layernorm.bias"));
  const int64_t D = c.vision.hidden;
  for (int i = 0; i < c.vision.layers; ++i) {
    const std::string s = v + "encoder.layers." + std::to_string(i) + ".", d = "vision_encoder.blocks." + std::to_string(i) + ".";
    for (auto [a_, b_] : {std::pair{"layer_norm1", "ln1"}, {"layer_norm2", "ln2"}, {"mlp.fc1", "mlp.fc1"},
                          {"mlp.fc2", "mlp.fc2"}, {"self_attn.out_proj", "attn.out_proj"}})
      for (const char* w : {".weight", ".bias"}) t.emplace_back(d + b_ + w, get(s + a_ + w));
    for (const char* w : {"weight", "bias"}) {
      Tensor qkv = get(s + "self_attn.q_proj." + w);
      Shape shape = qkv.shape();
      shape[0] = 3 * D;
      Tensor fused = Tensor::empty(shape, DType::f32);
      int k = 0;
      for (const char* p : {"q_proj.", "k_proj.", "v_proj."}) fused.slice(0, k * D, (k + 1) * D).copy_from(get(s + "self_attn." + p + w)), ++k;
      t.emplace_back(d + "attn.qkv_proj." + w, fused);
    }
  }
  t.emplace_back("MP.proj.weight", get("model.connector.modality_projection.proj.weight"));
  t.emplace_back("decoder.head.weight", get(x + "embed_tokens.weight"));
  t.emplace_back("decoder.norm.weight", get(x + "norm.weight"));
  for (int i = 0; i < c.text.layers; ++i) {
    const std::string s = x + "layers." + std::to_string(i) + ".", d = "decoder.blocks." + std::to_string(i) + ".";
    for (auto [a_, b_] : {std::pair{"self_attn.q_proj", "attn.q_proj"}, {"self_attn.k_proj", "attn.k_proj"},
                          {"self_attn.v_proj", "attn.v_proj"}, {"self_attn.o_proj", "attn.out_proj"},
                          {"mlp.gate_proj", "mlp.gate_proj"}, {"mlp.up_proj", "mlp.up_proj"},
                          {"mlp.down_proj", "mlp.down_proj"}, {"input_layernorm", "norm1"},
                          {"post_attention_layernorm", "norm2"}})
      t.emplace_back(d + b_ + ".weight", get(s + a_ + ".weight"));
  }
  const std::string dir = testing::scratch_dir("hf_nanovlm");
  ASSERT_TRUE(safetensors_save(dir + "/model.safetensors", t).ok());
  write_text(dir + "/config.json", str(R"({"vit_hidden_dim": )", c.vision.hidden, R"(, "vit_inter_dim": )",
                                       c.vision.mlp_hidden, R"(, "vit_patch_size": )", c.vision.patch_size,
                                       R"(, "vit_img_size": )", c.vision.image_size, R"(, "vit_n_heads": )",
                                       c.vision.heads, R"(, "vit_n_blocks": )", c.vision.layers,
                                       R"(, "vit_ln_eps": 1e-6, "vit_cls_flag": false, "lm_hidden_dim": )",
                                       c.text.hidden, R"(, "lm_inter_dim": )", c.text.intermediate,
                                       R"(, "lm_rms_eps": 1e-5, "lm_re_base": 10000, "lm_max_position_embeddings": )",
                                       c.text.max_seq_len, R"(, "lm_vocab_size": )", c.text.vocab_size,
                                       R"(, "lm_n_heads": )", c.text.heads, R"(, "lm_n_kv_heads": )", c.text.kv_heads,
                                       R"(, "lm_n_blocks": )", c.text.layers,
                                       R"(, "lm_tie_weights": true, "mp_pixel_shuffle_factor": 2})"));
  auto b = load_model_dir(dir, Device::cpu());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  for (const Param& p : a.params().all())
    EXPECT_TRUE(testing::all_close((*b)->params().find(p.name)->value, p.value, 0, 0)) << p.name;
}

// model_forward's input checks name the tensor.
TEST(ModelForward, MalformedInputsNameTheTensor) {
  ModelConfig c = testing::tiny_config(true, 0);
  c.image_token_id = 5;
  VlmModel m(c, Device::cpu());
  m.init_weights(2);
  std::map<std::string, Tensor> in;
  in["input_ids"] = Tensor::from_vector(std::vector<int64_t>{1, 5, 5, 5, 5, 7}, {1, 6});
  in["pixel_values"] = testing::random_normal({1, 3, c.vision.image_size, c.vision.image_size}, 1);
  auto ok = model_forward(m, in);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->at("logits").shape(), Shape({1, 6, c.text.vocab_size}));
  auto expect_error = [&](std::map<std::string, Tensor> bad, const std::string& word) {
    auto r = model_forward(m, bad);
    ASSERT_FALSE(r.ok()) << word;
    EXPECT_NE(r.status().message().find(word), std::string::npos) << r.status().to_string();
  };
  auto bad = in;
  bad["input_ids"] = Tensor::zeros({1, 6}, DType::f32);
  expect_error(bad, "input_ids");
  bad = in;
  bad["input_ids"] = Tensor::from_vector(std::vector<int64_t>{1, 5, 5, 5, 7, 7}, {1, 6});
  expect_error(bad, "placeholders");
  bad = in;
  bad["attention_mask"] = Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 0}, {1, 6});
  expect_error(bad, "attention_mask");
  bad = in;
  bad["input_ids"] = Tensor::from_vector(std::vector<int64_t>{1, 5, 5, 5, 5, 999}, {1, 6});
  expect_error(bad, "vocabulary");
  bad = in;
  bad.erase("input_ids");
  expect_error(bad, "input_ids");
}

}  // namespace
}  // namespace vlm
