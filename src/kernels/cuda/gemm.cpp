// GEMMs through cuBLASLt: matmul (plain and strided-batched), linear forward (bias epilogue), linear + GELU-tanh
// (GELU_AUX_BIAS epilogue, saving the pre-activation) and linear backward (dx in the compute dtype; dw += in f32
// with beta = 1, i.e. bf16 A/B, f32 C/D, compute 32F; db += through the deterministic column reduction, beside dw).
//
// Row-major to cuBLASLt's column-major: out[m, n] = op(a) @ op(b) is, read column-major, out^T[n, m] =
// op(b)^T @ op(a)^T, so cuBLASLt's A is our b and its B is our a, with the same transpose flags and no copies.
// Per device: one cuBLASLt handle; per (device, stream): a 32 MiB workspace; per problem (shape, dtypes, flags,
// epilogue, pointer alignments): one algorithm, cached, so a shape always runs the same algorithm and repeated calls
// are bit-identical. The algorithm is the heuristic's first, or with autotuning on (set_gemm_autotune: the trainer
// unless train.deterministic) the fastest of the heuristic's first kAutotuneCandidates, timed on first use into a
// scratch output (VLM_GEMM_AUTOTUNE_LOG=1 prints each choice and its split-K). Split-K candidates are left out of
// f32-input GEMMs, so that autotuned fp32 runs repeat (splitk_allowed). linear_add_forward reads the residual as
// cuBLASLt's C. Weight gradients run on a side stream beside the input gradients (ops::WeightGradOverlap).
// Autotuned choices can differ between processes (timing noise), and with them the rounding of results.
// Compute type is always 32F (no TF32), so f32 GEMMs are fp32.
// linear_forward and linear_add_forward of at most kGemvMaxRows rows run as gemv.cu's one pass over the weights.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "core/cuda_check.h"
#include "core/env.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"

#define VLM_CUBLASLT_CHECK(call)                                                                             \
  do {                                                                                                       \
    cublasStatus_t _vlm_status = (call);                                                                     \
    if (_vlm_status != CUBLAS_STATUS_SUCCESS)                                                                \
      ::vlm::detail::check_failed(__FILE__, __LINE__, #call,                                                 \
                                  ::vlm::str(cublasLtGetStatusName(_vlm_status), ": ",                      \
                                             cublasLtGetStatusString(_vlm_status)));                        \
  } while (0)

namespace vlm::ops::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what NVIDIA recommends for Hopper
constexpr int kMaxDevices = 64;
constexpr int kAutotuneCandidates = 8;  // the heuristic's top choices timed when autotuning
constexpr int kAutotuneRuns = 3;        // timed runs per candidate (after one untimed)

bool autotune_log() {
  static const bool on = env::flag("VLM_GEMM_AUTOTUNE_LOG");
  return on;
}

// The (id, tile, stages, swizzle, split-K) of an algorithm, for the autotune log and the split-K filter.
struct GemmAlgoConfig {
  int id = -1;
  unsigned tile = 0, stages = 0, swizzle = 0;
  int splitk = 1;
};
template <class T>
T config_of(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T fallback) {
  T v = fallback;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS)
    return fallback;
  return v;
}
GemmAlgoConfig gemm_algo_config(const cublasLtMatmulAlgo_t& algo) {
  GemmAlgoConfig c;
  c.id = config_of<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID, -1);
  c.tile = config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, 0);
  c.stages = config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, 0);
  c.swizzle = config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 0);
  c.splitk = config_of<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
  return c;
}

// Whether a GEMM may take the heuristic's split-K candidates (each adds a reduction kernel over a workspace): all
// but those with f32 inputs. Autotuning may pick a different split-K variant in each process, and with it other
// rounding, so fp32 runs (the parity path, where repeating bit for bit matters more than speed) leave split-K out;
// bf16 keeps it, and `train.deterministic` gives bf16 runs that repeat.
bool splitk_allowed(cudaDataType_t in_type) { return in_type != CUDA_R_32F; }
// Drops the split-K entries of results[0, found) in place, keeping their order; returns how many are left (the
// first entry alone when every one is split-K).
int without_splitk(cublasLtMatmulHeuristicResult_t* results, int found) {
  int kept = 0;
  for (int i = 0; i < found; ++i)
    if (gemm_algo_config(results[i].algo).splitk <= 1) results[kept++] = results[i];
  return kept > 0 ? kept : std::min(found, 1);
}

std::atomic<bool> g_autotune{false};  // set_gemm_autotune

// One row-major GEMM: out[m, n] (ld n) = alpha * op(a) @ op(b) + beta * c for each of `batch` entries (c = out
// unless given: a separate addend of out's type and layout), with an optional epilogue: + bias[n] (in the out
// dtype), then GELU-tanh with the pre-activation written to aux [m, n].
struct Gemm {
  void* out = nullptr;
  const void* c = nullptr;  // null: c = out
  cudaDataType_t out_type = CUDA_R_32F;
  const void* a = nullptr;
  const void* b = nullptr;
  cudaDataType_t in_type = CUDA_R_32F;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 0.f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
};

using GemmKey = std::array<int64_t, 16>;

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  std::map<StreamHandle, void*> workspaces;
  std::map<GemmKey, std::optional<cublasLtMatmulAlgo_t>> algos;  // nullopt: no algorithm for this problem
};

std::mutex g_mutex;
std::array<DeviceState, kMaxDevices> g_devices;

cudaDataType_t lt_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    default: VLM_FAIL("gemm: cuBLASLt path takes f32 or bf16, got ", dtype_name(dtype));
  }
}

size_t type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// Largest power of two (up to 256) that divides the address: what cuBLASLt may assume about the pointer.
uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// RAII owners of the per-call descriptors.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

template <class V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& value) {
  VLM_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
}

// A column-major rows x cols matrix with leading dimension ld, batched with `stride` elements between entries.
void make_layout(Layout& layout, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                 int64_t stride) {
  VLM_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&layout.l, type, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    VLM_CUBLASLT_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    VLM_CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(layout.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &stride, sizeof(stride)));
  }
}

DeviceState& device_state(Device dev) {
  VLM_CHECK(dev.index >= 0 && dev.index < kMaxDevices, "gemm: device index ", dev.index, " out of range");
  DeviceState& st = g_devices[static_cast<size_t>(dev.index)];
  if (st.handle == nullptr) VLM_CUBLASLT_CHECK(cublasLtCreate(&st.handle));
  return st;
}

void* workspace(DeviceState& st, StreamHandle stream) {
  void*& w = st.workspaces[stream];
  if (w == nullptr) VLM_CUDA_CHECK(cudaMalloc(&w, kWorkspaceBytes));
  return w;
}

// Autotuning: times each candidate algorithm for g (one untimed run, then kAutotuneRuns) on dev's current stream
// with the real inputs and a scratch output (so an accumulating GEMM's real output is not touched; the GELU aux
// output is written, and rewritten by the real call), and returns the fastest. Synchronizes the stream.
cublasLtMatmulAlgo_t fastest_algo(const Gemm& g, Device dev, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                  cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                  void* ws, const cublasLtMatmulHeuristicResult_t* results, int count) {
  const auto stream = static_cast<cudaStream_t>(current_stream(dev));
  Tensor out = scratch({static_cast<int64_t>(type_size(g.out_type)) * g.m * g.n * g.batch}, DType::u8, dev);
  VLM_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, static_cast<size_t>(out.numel()), stream));
  cudaEvent_t start = nullptr, stop = nullptr;
  VLM_CUDA_CHECK(cudaEventCreate(&start));
  VLM_CUDA_CHECK(cudaEventCreate(&stop));
  int best = 0;
  float best_ms = -1.f, first_ms = -1.f;
  for (int i = 0; i < count; ++i) {
    auto run = [&] {
      return cublasLtMatmul(handle, desc, &g.alpha, g.b, la, g.a, lb, &g.beta, out.raw_data(), lc, out.raw_data(),
                            lc, &results[i].algo, ws, kWorkspaceBytes, stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate cuBLASLt cannot run after all: skip it
    VLM_CUDA_CHECK(cudaEventRecord(start, stream));
    bool ok = true;
    for (int r = 0; r < kAutotuneRuns; ++r) ok = ok && run() == CUBLAS_STATUS_SUCCESS;
    VLM_CUDA_CHECK(cudaEventRecord(stop, stream));
    VLM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    VLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i == 0) first_ms = ms;
    if (ok && (best_ms < 0.f || ms < best_ms)) {
      best_ms = ms;
      best = i;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (autotune_log()) {
    const GemmAlgoConfig c = gemm_algo_config(results[best].algo);
    std::fprintf(stderr, "gemm autotune: m=%lld n=%lld k=%lld batch=%lld ta=%d tb=%d beta=%g epilogue=%d: "
                 "candidate %d of %d (algo %d tile %u stages %u swizzle %u split-k %d) %.1f us, "
                 "heuristic's first %.1f us\n",
                 static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
                 static_cast<long long>(g.batch), g.trans_a ? 1 : 0, g.trans_b ? 1 : 0, static_cast<double>(g.beta),
                 static_cast<int>(g.epilogue), best, count, c.id, c.tile, c.stages, c.swizzle, c.splitk,
                 1e3 * best_ms / kAutotuneRuns, 1e3 * first_ms / kAutotuneRuns);
  }
  return results[best].algo;
}

// Runs g on `dev`'s current stream; false (nothing launched) when cuBLASLt has no algorithm for it, which the
// callers of the fused forms (the GELU epilogue, a separate C) answer with the unfused ops; any other GEMM aborts.
bool run_gemm(const Gemm& g, Device dev) {
  VLM_CHECK(g.m > 0 && g.n > 0 && g.k > 0 && g.batch >= 1, "gemm: empty problem reached cuBLASLt");
  const bool fused = g.aux != nullptr || g.c != nullptr;  // a form with an unfused fallback
  const StreamHandle stream = current_stream(dev);
  MatmulDesc desc;
  VLM_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's A = our b, its B = our a (see the top of the file).
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
    if (g.bias != nullptr) set_desc(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    if (g.aux != nullptr) {
      set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
      set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.n);
    }
  }
  Layout la, lb, lc;
  if (g.trans_b) make_layout(la, g.in_type, g.k, g.n, g.k, g.batch, g.n * g.k);  // b stored [n, k]
  else make_layout(la, g.in_type, g.n, g.k, g.n, g.batch, g.n * g.k);             // b stored [k, n]
  if (g.trans_a) make_layout(lb, g.in_type, g.m, g.k, g.m, g.batch, g.m * g.k);  // a stored [k, m]
  else make_layout(lb, g.in_type, g.k, g.m, g.k, g.batch, g.m * g.k);             // a stored [m, k]
  make_layout(lc, g.out_type, g.n, g.m, g.n, g.batch, g.m * g.n);

  const void* c = g.c != nullptr ? g.c : g.out;
  const uint32_t align_a = alignment(g.b), align_b = alignment(g.a), align_d = alignment(g.out),
                 align_c = std::min(align_d, alignment(c));
  const GemmKey key{dev.index,
                    g.m,
                    g.n,
                    g.k,
                    g.batch,
                    (g.trans_a ? 1 : 0) | (g.trans_b ? 2 : 0) | (g.beta != 0.f ? 4 : 0) | (g.c != nullptr ? 8 : 0),
                    static_cast<int64_t>(g.in_type),
                    static_cast<int64_t>(g.out_type),
                    static_cast<int64_t>(g.epilogue),
                    align_a,
                    align_b,
                    align_c,
                    g.bias != nullptr ? alignment(g.bias) : 0,
                    g.aux != nullptr ? alignment(g.aux) : 0,
                    align_d,
                    0};
  std::optional<cublasLtMatmulAlgo_t> algo;
  cublasLtHandle_t handle;
  void* ws;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    DeviceState& st = device_state(dev);
    handle = st.handle;
    ws = workspace(st, stream);
    auto it = st.algos.find(key);
    if (it == st.algos.end()) {
      Preference pref;
      VLM_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
      auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
        VLM_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, attr, &value, sizeof(value)));
      };
      set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c);
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
      // Split-K partial sums only in the compute type (fp32): the in-place and output-type schemes would add bf16
      // partials, many ulps off for small bf16 GEMMs.
      set_pref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
      const bool tune = g_autotune.load();
      std::array<cublasLtMatmulHeuristicResult_t, kAutotuneCandidates> results{};
      int found = 0;
      const bool splitk = splitk_allowed(g.in_type);
      const cublasStatus_t status =
          cublasLtMatmulAlgoGetHeuristic(handle, desc.d, la.l, lb.l, lc.l, lc.l, pref.p,
                                         tune || !splitk ? kAutotuneCandidates : 1, results.data(), &found);
      if (status == CUBLAS_STATUS_SUCCESS && !splitk) found = without_splitk(results.data(), found);
      if (!tune) found = std::min(found, 1);
      std::optional<cublasLtMatmulAlgo_t> entry;
      if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
        entry = found > 1 ? fastest_algo(g, dev, handle, desc.d, la.l, lb.l, lc.l, ws, results.data(), found)
                          : results[0].algo;
      } else if (status != CUBLAS_STATUS_NOT_SUPPORTED && !fused) {
        VLM_CUBLASLT_CHECK(status);
      }
      // (a fused form cuBLASLt rejects, for any reason, falls back to the unfused path)
      it = st.algos.emplace(key, entry).first;
    }
    algo = it->second;
  }
  if (!algo) {
    VLM_CHECK(fused, "gemm: cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k, " batch=", g.batch);
    return false;
  }
  VLM_CUBLASLT_CHECK(cublasLtMatmul(handle, desc.d, &g.alpha, g.b, la.l, g.a, lb.l, &g.beta, c, lc.l, g.out, lc.l,
                                    &*algo, ws, kWorkspaceBytes, static_cast<cudaStream_t>(stream)));
  return true;
}

// out = beta * out when the inner dimension is empty (the product is zero); beta == 0 overwrites, NaN included.
void empty_product(Tensor& out, float beta) {
  if (beta == 0.f) fill(out, 0.f);
  else if (beta != 1.f) scale(out, beta);
}

// Rows of a [..., C] tensor: the product of the leading dims (also when C == 0, where numel() / C cannot tell).
int64_t rows_of(const Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.ndim(); ++i) rows *= t.dim(i);
  return rows;
}

// out[m, n] = a[m, k] @ b[k, n] with the tensors' element types and no epilogue; callers set the transposes, the
// scales and the epilogue.
Gemm product(Tensor& out, const Tensor& a, const Tensor& b, int64_t m, int64_t n, int64_t k) {
  Gemm g;
  g.out = out.raw_data();
  g.out_type = lt_type(out.dtype());
  g.a = a.raw_data();
  g.b = b.raw_data();
  g.in_type = lt_type(a.dtype());
  g.m = m;
  g.n = n;
  g.k = k;
  return g;
}

// y[T, out] = x @ w^T (+ b) with an optional GELU epilogue writing the pre-activation to `pre`; false when the
// epilogue has no algorithm.
bool linear_gemm(Tensor& y, Tensor* pre, const Tensor& x, const Tensor& w, const Tensor& b) {
  Gemm g = product(y, x, w, rows_of(x), w.dim(0), w.dim(1));
  g.trans_b = true;
  if (pre != nullptr) {
    g.epilogue = b.defined() ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    g.aux = pre->raw_data();
  } else if (b.defined()) {
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  if (b.defined()) g.bias = b.raw_data();
  return run_gemm(g, y.device());
}

}  // namespace

void set_gemm_autotune(bool on) { g_autotune.store(on); }

void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta,
            bool batched) {
  const int first = batched ? 1 : 0;
  const int64_t m = out.dim(first), n = out.dim(first + 1), k = a.dim(trans_a ? first : first + 1);
  const int64_t batch = batched ? out.dim(0) : 1;
  if (m == 0 || n == 0 || batch == 0) return;
  DeviceGuard guard(out.device());
  if (k == 0) return empty_product(out, beta);
  Gemm g = product(out, a, b, m, n, k);
  g.batch = batch;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.alpha = alpha;
  g.beta = beta;
  run_gemm(g, out.device());
}

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t rows = rows_of(x), out = w.dim(0), in = w.dim(1);
  if (rows == 0 || out == 0) return;
  DeviceGuard guard(y.device());
  if (in == 0) {  // y = b broadcast (or 0)
    fill(y, 0.f);
    if (b.defined()) add_rows_broadcast(y, b, rows);
    return;
  }
  if (gemv_forward(y, x, Tensor(), 0.f, w, b, Tensor(), /*swiglu=*/false)) return;  // a few rows: one weight pass
  linear_gemm(y, nullptr, x, w, b);
}

void linear_add_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual) {
  const int64_t rows = rows_of(x), out = w.dim(0), in = w.dim(1);
  if (rows == 0 || out == 0) return;
  DeviceGuard guard(y.device());
  if (in > 0 && gemv_forward(y, x, Tensor(), 0.f, w, b, residual, /*swiglu=*/false)) return;
  if (in > 0) {
    // One GEMM reading the residual as cuBLASLt's C (beta = 1): y = x w^T + residual, then + b in the epilogue.
    Gemm g = product(y, x, w, rows, out, in);
    g.trans_b = true;
    g.beta = 1.f;
    g.c = residual.raw_data();
    if (b.defined()) {
      g.epilogue = CUBLASLT_EPILOGUE_BIAS;
      g.bias = b.raw_data();
    }
    if (run_gemm(g, y.device())) return;
  }
  // An empty inner dimension, or no algorithm for the fused form: the two ops (y = product + residual, the same
  // bits as residual + product).
  linear_forward(y, x, w, b);
  add_inplace(y, residual);
}

void linear_gelu_forward(Tensor& y, Tensor& pre, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t rows = rows_of(x), out = w.dim(0), in = w.dim(1);
  if (rows == 0 || out == 0) return;
  DeviceGuard guard(y.device());
  // The fused epilogue for bf16 (its GELU need not match ours bit for bit; f32 is the tight parity path) when the
  // pre-activation's leading dimension meets cuBLASLt's multiple-of-8 rule.
  if (in > 0 && y.dtype() == DType::bf16 && out % 8 == 0 && linear_gemm(y, &pre, x, w, b)) return;
  linear_forward(pre, x, w, b);
  gelu_tanh_forward(y, pre);
}

namespace {
// dx[rows, in] = dy[rows, out] @ w[out, in], the input gradient of a linear layer (out > 0).
Gemm input_grad_gemm(Tensor& dx, const Tensor& dy, const Tensor& w, int64_t rows) {
  return product(dx, dy, w, rows, w.dim(1), w.dim(0));
}

// Weight gradients on the side stream (cuda_context.h): each dw GEMM waits for the current stream's work so far
// (its dy and x), runs beside what the current stream does next, and is joined (the current stream waits for the
// side stream) at the end of linear_backward or, inside ops::WeightGradOverlap scopes, at the outermost scope's
// end, which also drops the references that kept dy and x alive until then (their memory is reused in the current
// stream's order, after the join). Narrow layers' dw products fill a fraction of the SMs (a 576 x 576 gradient over
// 11k tokens: 100 CTAs on 132 SMs), so they overlap the next input gradient and the element-wise ops.
struct OverlapState {
  int depth = 0;             // open WeightGradOverlap scopes
  bool pending = false;      // side-stream work not yet joined
  std::vector<Tensor> keep;  // inputs of pending weight gradients
};
thread_local std::array<OverlapState, kMaxDevices> t_overlap;

OverlapState& overlap_state(Device dev) {
  VLM_CHECK(dev.index >= 0 && dev.index < kMaxDevices, "gemm: device index ", dev.index, " out of range");
  return t_overlap[static_cast<size_t>(dev.index)];
}

void join_side_stream(Device dev, OverlapState& st) {
  if (!st.pending) return;
  stream_wait(dev.index, current_stream(dev), side_stream(dev.index));
  st.pending = false;
  st.keep.clear();
}

// Runs work() with the side stream current, after the current stream's work so far.
template <class F>
void run_on_side_stream(Device dev, OverlapState& st, F&& work) {
  const StreamHandle main = current_stream(dev), side = side_stream(dev.index);
  stream_wait(dev.index, side, main);
  st.pending = true;
  set_current_stream(dev.index, side);  // run_gemm (and its autotuning scratch) use the current stream
  try {
    work();
  } catch (...) {
    set_current_stream(dev.index, main);
    throw;
  }
  set_current_stream(dev.index, main);
}

// dw[out, in] += dy^T @ x (f32 output), then db[out] += the column sums of dy when db is given, both on the current
// stream: with the side stream current, the bias gradient's pass over dy leaves the critical path too. (The GEMM's
// BGRADB epilogue, which sums dy inside the product, slows the ViT's dw products by more than the separate pass
// costs.)
void weight_grad(Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, int64_t rows, Device dev) {
  Gemm g = product(dw, dy, x, dw.dim(0), dw.dim(1), rows);
  g.out_type = CUDA_R_32F;
  g.trans_a = true;
  g.beta = 1.f;
  run_gemm(g, dev);
  if (db.defined()) column_sums_accumulate(db, dy, rows, dw.dim(0));
}

}  // namespace

void weight_grad_overlap_begin(Device device) { ++overlap_state(device).depth; }

void weight_grad_overlap_end(Device device) {
  OverlapState& st = overlap_state(device);
  VLM_CHECK(st.depth > 0, "gemm: weight_grad_overlap_end without a matching begin");
  if (--st.depth == 0) {
    DeviceGuard guard(device);
    join_side_stream(device, st);
  }
}

void linear_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w) {
  const int64_t rows = rows_of(x), out = w.dim(0), in = w.dim(1);
  const Device dev = dy.device();
  DeviceGuard guard(dev);
  const bool want_dx = dx.defined() && rows > 0 && in > 0, want_dw = dw.defined() && rows > 0 && out > 0 && in > 0;
  OverlapState& st = overlap_state(dev);
  const bool side = want_dw && (st.depth > 0 || want_dx);
  if (want_dw) {  // db goes with dw, or alone below
    if (side) {
      run_on_side_stream(dev, st, [&] { weight_grad(dw, db, dy, x, rows, dev); });
      if (st.depth > 0) {
        st.keep.push_back(dy);
        st.keep.push_back(x);
      }
    } else {
      weight_grad(dw, db, dy, x, rows, dev);
    }
  }
  if (want_dx) {  // dx[T, in] = dy[T, out] @ w[out, in]
    if (out == 0) {
      fill(dx, 0.f);
    } else {
      run_gemm(input_grad_gemm(dx, dy, w, rows), dev);
    }
  }
  if (db.defined() && !want_dw) column_sums_accumulate(db, dy, rows, out);
  if (side && st.depth == 0) join_side_stream(dev, st);
}

void linear_dgelu_backward(Tensor& dpre, const Tensor& dy, const Tensor& w, const Tensor& pre) {
  const int64_t rows = rows_of(pre), out = w.dim(0), in = w.dim(1);
  if (rows == 0 || in == 0) return;
  const Device dev = dy.device();
  DeviceGuard guard(dev);
  if (out == 0) return fill(dpre, 0.f);  // the product is zero, and so is its gradient through the GELU
  if (dpre.dtype() == DType::bf16 && in % 8 == 0) {  // dpre[T, in] = dy[T, out] @ w[out, in], DGELU(aux = pre)
    Gemm g = input_grad_gemm(dpre, dy, w, rows);
    g.epilogue = CUBLASLT_EPILOGUE_DGELU;
    g.aux = const_cast<void*>(pre.raw_data());  // read only: the GELU input the forward's GELU_AUX epilogue saved
    if (run_gemm(g, dev)) return;
  }
  Tensor none, prod = scratch(dpre.shape(), dpre.dtype(), dev);
  linear_backward(prod, none, none, dy, pre, w);
  gelu_tanh_backward(dpre, prod, pre);
}

}  // namespace vlm::ops::cuda
