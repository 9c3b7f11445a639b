// model_forward: a transformers-style batch through VlmModel (see model_forward.h).
#include "model/model_forward.h"

#include <vector>

namespace vlm {

namespace {

Expected<Tensor> find(const std::map<std::string, Tensor>& in, const std::string& name, bool required) {
  auto it = in.find(name);
  if (it == in.end()) {
    if (required) return invalid_argument("inputs: '" + name + "' is missing");
    return Tensor();
  }
  return it->second.is_contiguous() ? it->second : it->second.clone();
}

Expected<Tensor> pixels(const std::map<std::string, Tensor>& in, const VisionConfig& v, bool required) {
  VLM_ASSIGN_OR_RETURN(Tensor px, find(in, "pixel_values", required));
  if (!px.defined()) return px;
  if (px.dtype() != DType::f32) return invalid_argument("inputs: pixel_values is " + std::string(dtype_name(px.dtype())) + ", expected f32");
  if (px.ndim() != 4 || px.dim(1) != v.channels || px.dim(2) != v.image_size || px.dim(3) != v.image_size)
    return invalid_argument(str("inputs: pixel_values has shape ", px.shape().to_string(), ", expected [N, ",
                                v.channels, ", ", v.image_size, ", ", v.image_size, "]"));
  return px;
}

}  // namespace

Expected<std::map<std::string, Tensor>> model_forward(VlmModel& model, const std::map<std::string, Tensor>& inputs,
                                                      int image_token_id) {
  const ModelConfig& c = model.config();
  const Device dev = model.device();
  std::map<std::string, Tensor> out;
  if (!c.has_text()) {
    VLM_ASSIGN_OR_RETURN(Tensor px, pixels(inputs, c.vision, true));
    Tensor f = model.vision_features(px.to(dev)).to(Device::cpu());
    out["last_hidden_state"] = f.view({px.dim(0), c.vision.n_patches(), c.vision.hidden});
    return out;
  }
  VLM_ASSIGN_OR_RETURN(Tensor ids, find(inputs, "input_ids", true));
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)
    return invalid_argument("inputs: input_ids is " + std::string(dtype_name(ids.dtype())) + ", expected i32 or i64");
  if (ids.ndim() != 2 || ids.numel() == 0)
    return invalid_argument("inputs: input_ids has shape " + ids.shape().to_string() + ", expected [B, T]");
  const int64_t B = ids.dim(0), T = ids.dim(1);
  if (T > c.text.max_seq_len)
    return invalid_argument(str("inputs: input_ids has ", T, " tokens per sequence, the model at most ",
                                c.text.max_seq_len));
  VLM_ASSIGN_OR_RETURN(Tensor mask, find(inputs, "attention_mask", false));
  if (mask.defined()) {
    if (mask.shape() != ids.shape())
      return invalid_argument("inputs: attention_mask has shape " + mask.shape().to_string() + ", input_ids " +
                              ids.shape().to_string());
    for (int64_t i = 0; i < mask.numel(); ++i)
      if (mask.item_f32(i) != 1.f)
        return unsupported(str("inputs: attention_mask[", i / T, ", ", i % T, "] is 0: padding is not supported"));
  }
  const int image_id = image_token_id >= 0 ? image_token_id : c.image_token_id;
  VLM_ASSIGN_OR_RETURN(Tensor px, pixels(inputs, c.vision, false));
  if (px.defined() && c.model_parts() != ModelParts::vlm)
    return invalid_argument("inputs: pixel_values given to a text model");
  if (px.defined() && image_id < 0)
    return invalid_argument("inputs: pixel_values given but the image token id is unknown (--image-token-id)");

  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), positions(tokens.size()), cu(static_cast<size_t>(B + 1));
  std::vector<int32_t> image_rows, rows(tokens.size());
  for (int64_t i = 0; i < B * T; ++i) {
    const double v = ids.dtype() == DType::i64 ? static_cast<double>(ids.data<int64_t>()[i]) : ids.data<int32_t>()[i];
    if (v < 0 || v >= c.text.vocab_size)
      return invalid_argument(str("inputs: input_ids[", i / T, ", ", i % T, "] = ", v, " is outside the vocabulary (",
                                  c.text.vocab_size, ")"));
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
    rows[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    if (px.defined() && static_cast<int>(v) == image_id) image_rows.push_back(static_cast<int32_t>(i));
  }
  for (int64_t b = 0; b <= B; ++b) cu[static_cast<size_t>(b)] = static_cast<int32_t>(b * T);
  const int64_t n_images = px.defined() ? px.dim(0) : 0;
  if (static_cast<int64_t>(image_rows.size()) != n_images * (n_images ? c.image_tokens() : 0))
    return invalid_argument(str("inputs: ", image_rows.size(), " image placeholders (id ", image_id, ") but ",
                                n_images, " images of ", c.image_tokens(), " tokens each"));
  const int64_t n = B * T;
  VlmInputs in;
  in.tokens = Tensor::from_vector(tokens, {n}).to(dev);
  in.positions = Tensor::from_vector(positions, {n}).to(dev);
  in.cu_seqlens = Tensor::from_vector(cu, {B + 1}).to(dev);
  in.max_seqlen = static_cast<int>(T);
  in.image_rows = Tensor::from_vector(image_rows, {static_cast<int64_t>(image_rows.size())}).to(dev);
  Tensor image_tokens;
  if (n_images > 0) {
    in.images = px.to(dev);
    image_tokens = model.encode_images(in.images);
  }
  Tensor logits = model.logits_at_rows(in, image_tokens, Tensor::from_vector(rows, {n}).to(dev));
  out["logits"] = logits.to(Device::cpu()).view({B, T, logits.dim(1)});
  return out;
}

}  // namespace vlm
