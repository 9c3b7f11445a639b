// The FlashAttention GPU test table and host helpers (see flash_test_cases.h).
#include "kernels/flash/flash_test_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <tuple>

#include "core/philox.h"

namespace vlm::flash::testing {

namespace {

Case dense(int d, int hq, int hkv, int lq, int lk, bool causal) {
  Case c;
  c.head_dim = d;
  c.n_heads_q = hq;
  c.n_heads_kv = hkv;
  c.len_q = {lq};
  c.len_k = {lk};
  c.causal = causal;
  c.small = static_cast<int64_t>(lq) * lk <= 3000;
  return c;
}

uint16_t nan_bits(DType dtype) { return dtype == DType::bf16 ? 0x7fc0 : 0x7e00; }

}  // namespace

std::vector<Case> all_cases() {
  std::vector<Case> v;
  const int heads[3][2] = {{4, 4}, {4, 2}, {6, 1}};  // MHA, GQA 2:1, MQA
  int rot = 0;
  // The fast-path head dims over odd lengths, both masks, Lq != Lk in both directions.
  const int lens[][2] = {{1, 1},     {17, 17}, {129, 129}, {1000, 1000}, {17, 129},
                         {129, 17},  {1, 1000}, {1000, 1},  {256, 256},   {64, 300}};
  for (int d : {64, 128})
    for (const auto& l : lens)
      for (bool causal : {false, true}) {
        const auto& h = heads[rot++ % 3];
        v.push_back(dense(d, h[0], h[1], l[0], l[1], causal));
      }
  // The same shapes again on the portable path (auto_select takes the Hopper path for d 64/128 bf16 on sm_90).
  const size_t n_fast = v.size();
  for (size_t i = 0; i < n_fast; ++i) {
    Case c = v[i];
    c.portable = true;
    v.push_back(c);
  }
  // The other head dims (padded to a compiled size), including dims below 64.
  const int other_lens[][2] = {{17, 17}, {129, 129}, {200, 333}, {333, 200}};
  for (int d : {32, 72, 80, 96, 256})
    for (const auto& l : other_lens) {
      const auto& h = heads[rot++ % 3];
      Case c = dense(d, h[0], h[1], l[0], l[1], (rot % 2) == 0);
      c.small = l[0] == 17 && (d == 80 || d == 256);
      v.push_back(c);
    }
  // Varlen batches with empty and length-1 sequences, different q and k lengths.
  for (int d : {64, 80, 128})
    for (bool causal : {false, true}) {
      Case c;
      c.head_dim = d;
      c.n_heads_q = 8;
      c.n_heads_kv = 2;
      c.len_q = {0, 1, 17, 129, 5, 0, 64, 300};
      c.len_k = {3, 1, 17, 100, 0, 7, 64, 300};
      c.causal = causal;
      c.small = d == 64;
      v.push_back(c);
      if (d != 80) {
        c.portable = true;
        v.push_back(c);
      }
    }
  // A dense batch, and one long sequence (many blocks in both directions).
  {
    Case c = dense(128, 4, 4, 300, 300, true);
    c.len_q = c.len_k = {300, 300, 300};
    v.push_back(c);
    v.push_back(dense(128, 2, 1, 2048, 2048, true));
  }
  // Many short sequences: more forward tiles and backward items than SMs, so the persistent kernels walk several
  // each (items of different lengths, some CTAs with one more than others); the first pair is in the sanitizer runs.
  for (bool causal : {false, true}) {
    Case c = dense(64, 4, 2, 1, 1, causal);
    c.len_q.clear();
    for (int i = 0; i < 150; ++i) c.len_q.push_back(1 + (i * 37) % 61);
    c.len_k = c.len_q;
    c.small = true;
    v.push_back(c);
  }
  for (int d : {64, 128}) {  // a training-like batch: 64 sequences of 150..259 tokens, GQA 3:1, causal
    Case c = dense(d, 6, 2, 1, 1, true);
    c.len_q.clear();
    for (int i = 0; i < 64; ++i) c.len_q.push_back(150 + (i * 53) % 110);
    c.len_k = c.len_q;
    c.small = false;
    v.push_back(c);
  }
  // q, k, v as column slices of one packed qkv tensor (row strides > H * D).
  for (auto [d, hkv, len, causal] : {std::tuple{64, 4, 129, true}, std::tuple{128, 2, 200, false}}) {
    Case c = dense(d, 4, hkv, len, len, causal);
    c.packed_qkv = true;
    c.small = false;
    v.push_back(c);
  }
  // Causal with more keys than queries by a multiple of 128 over rows of up to 11 key blocks: under
  // VLM_FLASH_CAUSAL_WIDE=1 the d=128 forward's mixed 128/160-key steps with a shifted diagonal (the square shapes
  // above cover diag = 0), and a varlen batch whose tiles end on each of the mixed schedule's transitions.
  {
    Case shifted = dense(128, 4, 2, 700, 956, true);
    shifted.small = true;  // the compute-sanitizer runs see the mixed steps and the backward item counter too
    v.push_back(shifted);
    Case c = dense(128, 4, 1, 1, 1, true);
    c.len_q = {641, 769, 897, 1280, 1408};
    c.len_k = {641, 769, 1025, 1280, 1408};
    c.small = false;
    v.push_back(c);
  }
  // fp16.
  for (auto [d, lq, lk, causal] : {std::tuple{64, 129, 129, false}, std::tuple{64, 129, 129, true},
                                   std::tuple{128, 17, 129, true}}) {
    Case c = dense(d, 4, 2, lq, lk, causal);
    c.dtype = DType::f16;
    v.push_back(c);
  }
  // Deterministic backward.
  {
    Case c;
    c.head_dim = 64;
    c.n_heads_q = 4;
    c.n_heads_kv = 1;
    c.len_q = {0, 1, 17, 129, 40};
    c.len_k = {5, 1, 17, 100, 90};
    c.causal = true;
    c.deterministic = true;
    c.small = true;
    v.push_back(c);
    Case c2 = dense(128, 4, 2, 257, 257, false);
    c2.deterministic = true;
    v.push_back(c2);
    Case c3 = dense(256, 2, 2, 65, 65, true);
    c3.deterministic = true;
    v.push_back(c3);
    // The text model's rows (9 / 3 heads, 177 causal) packed with a short one: dQ's kernel writes D for dkdv.
    Case c4 = dense(64, 9, 3, 177, 177, true);
    c4.len_q = c4.len_k = {177, 33, 177};
    c4.deterministic = true;
    v.push_back(c4);
  }
  return v;
}

std::string case_name(const Case& c) {
  std::ostringstream n;
  n << "d" << c.head_dim << "_h" << c.n_heads_q << "x" << c.n_heads_kv;
  const bool uniform = c.len_q == c.len_k &&
                       std::all_of(c.len_q.begin(), c.len_q.end(), [&](int32_t x) { return x == c.len_q[0]; });
  if (c.len_q.size() == 1) {
    n << "_q" << c.len_q[0] << "_k" << c.len_k[0];
  } else if (uniform) {
    n << "_batch" << c.len_q.size() << "x" << c.len_q[0];
  } else {
    n << "_varlen" << c.len_q.size();
  }
  n << (c.causal ? "_causal" : "_full") << (c.dtype == DType::bf16 ? "_bf16" : "_f16");
  if (c.packed_qkv) n << "_packed";
  if (c.deterministic) n << "_det";
  if (c.portable) n << "_portable";
  if (c.small) n << "_san";
  return n.str();
}

HostTensor random_host(int64_t n, DType dtype, uint64_t seed) {
  HostTensor h;
  h.bits.resize(static_cast<size_t>(n));
  h.values.resize(static_cast<size_t>(n));
  Philox rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const float x = rng.normal();
    const uint16_t b = dtype == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x);
    h.bits[i] = b;
    h.values[i] = dtype == DType::bf16 ? bf16_to_f32(b) : f16_to_f32(b);
  }
  return h;
}

Tensor upload_bits(const std::vector<uint16_t>& bits, const Shape& shape, DType dtype, Device device) {
  Tensor host = Tensor::empty(shape, dtype);
  if (!bits.empty()) std::memcpy(host.raw_data(), bits.data(), bits.size() * 2);
  return host.to(device);
}

std::vector<float> download_f32(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  std::vector<float> out(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) out[i] = h.item_f32(i);
  return out;
}

GuardedOutput::GuardedOutput(int64_t rows_, int64_t heads, int64_t dim, DType dtype, Device device) : rows(rows_) {
  const Shape shape{2 * kGuardRows + rows, heads, dim};
  buffer = upload_bits(std::vector<uint16_t>(static_cast<size_t>(shape.numel()), nan_bits(dtype)), shape, dtype,
                       device);
  view = buffer.slice(0, kGuardRows, kGuardRows + rows);
}

std::vector<uint16_t> GuardedOutput::bits() const {
  Tensor h = buffer.to(Device::cpu());
  const int64_t row_elems = h.numel() / h.dim(0);
  const auto* p = static_cast<const uint16_t*>(h.raw_data()) + kGuardRows * row_elems;
  return {p, p + rows * row_elems};
}

std::vector<double> GuardedOutput::values() const {
  const std::vector<uint16_t> b = bits();
  std::vector<double> out(b.size());
  for (size_t i = 0; i < b.size(); ++i) out[i] = buffer.dtype() == DType::bf16 ? bf16_to_f32(b[i]) : f16_to_f32(b[i]);
  return out;
}

::testing::AssertionResult GuardedOutput::check_guards() const {
  Tensor h = buffer.to(Device::cpu());
  const int64_t row_elems = h.numel() / h.dim(0);
  const auto* p = static_cast<const uint16_t*>(h.raw_data());
  const uint16_t sentinel = nan_bits(buffer.dtype());
  for (int64_t i = 0; i < h.numel(); ++i) {
    const int64_t row = i / row_elems;
    if (row >= kGuardRows && row < kGuardRows + rows) continue;
    if (p[i] != sentinel) return ::testing::AssertionFailure() << "guard element " << i << " (row " << row << ") was written";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult within_naive_bound(const std::string& what, const std::vector<double>& ours,
                                              const std::vector<double>& exact, const std::vector<double>& naive,
                                              double k, double floor_rel, double floor_abs) {
  if (ours.size() != exact.size() || naive.size() != exact.size())
    return ::testing::AssertionFailure() << what << ": size mismatch";
  double err = 0, err_naive = 0, max_ref = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    if (std::isinf(exact[i])) {
      if (ours[i] != exact[i])
        return ::testing::AssertionFailure() << what << "[" << i << "] = " << ours[i] << ", expected " << exact[i];
      continue;
    }
    if (!std::isfinite(ours[i]))
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << ours[i] << " (unwritten or NaN)"
                                           << ", expected " << exact[i];
    const double e = std::fabs(ours[i] - exact[i]);
    if (e > err) {
      err = e;
      worst = i;
    }
    if (std::isfinite(naive[i])) err_naive = std::max(err_naive, std::fabs(naive[i] - exact[i]));
    max_ref = std::max(max_ref, std::fabs(exact[i]));
  }
  const double bound = k * err_naive + floor_rel * max_ref + floor_abs;
  if (!(err <= bound))
    return ::testing::AssertionFailure() << what << ": max abs err " << err << " at " << worst << " (ours "
                                         << ours[worst] << ", exact " << exact[worst] << ") > bound " << bound
                                         << " = " << k << " * naive err " << err_naive << " + floor";
  return ::testing::AssertionSuccess() << what << ": err " << err << ", naive " << err_naive;
}

}  // namespace vlm::flash::testing
