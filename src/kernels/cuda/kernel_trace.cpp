// CUPTI activity tracing (see kernel_trace.h): the library loaded with dlopen, its activity buffers, the records
// parsed out of them, and the summary (interval union, per-name sums, demangled short names).
#include "kernels/cuda/kernel_trace.h"

#include <cuda_runtime.h>
#include <cupti.h>  // types and signatures only: every CUPTI function is reached through dlsym
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/env.h"

namespace vlm::ops::trace {

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Loading CUPTI.

struct Cupti {
  void* handle = nullptr;
  std::string path;
  decltype(&::cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&::cuptiActivityEnable) enable = nullptr;
  decltype(&::cuptiActivityDisable) disable = nullptr;
  decltype(&::cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&::cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&::cuptiGetResultString) result_string = nullptr;
  decltype(&::cuptiActivityGetNumDroppedRecords) num_dropped = nullptr;  // optional
};

// Fills `c` from the first candidate that loads and has every required symbol; the error names each try.
Status load_cupti(Cupti& c) {
  std::string tried;
  for (const std::string& name : cupti_library_candidates()) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();  // names the library
      tried += str(tried.empty() ? "" : "; ", e ? std::string(e) : name + ": dlopen failed");
      continue;
    }
    Cupti l;
    l.handle = h;
    l.path = name;
    std::string missing;
    auto sym = [&](auto& fn, const char* symbol, bool required) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, symbol));
      if (!fn && required) missing += str(missing.empty() ? "" : ", ", symbol);
    };
    sym(l.register_callbacks, "cuptiActivityRegisterCallbacks", true);
    sym(l.enable, "cuptiActivityEnable", true);
    sym(l.disable, "cuptiActivityDisable", true);
    sym(l.flush_all, "cuptiActivityFlushAll", true);
    sym(l.next_record, "cuptiActivityGetNextRecord", true);
    sym(l.result_string, "cuptiGetResultString", true);
    sym(l.num_dropped, "cuptiActivityGetNumDroppedRecords", false);
    if (!missing.empty()) {
      tried += str(tried.empty() ? "" : "; ", name, ": loaded, but lacks ", missing);
      dlclose(h);
      continue;
    }
    c = l;
    return Status();
  }
  return unsupported(str("kernel trace: cannot load CUPTI (", tried, "); set VLM_CUPTI_LIB to libcupti.so's path"));
}

// ---------------------------------------------------------------------------------------------------------------
// The trace: CUPTI hands its buffers back (from its own thread, or from cuptiActivityFlushAll) to buffer_completed,
// which parses them into `records` while `collecting`.

constexpr size_t kBufferBytes = size_t{4} << 20;
constexpr size_t kBufferAlign = 8;  // CUPTI's requirement (ACTIVITY_RECORD_ALIGNMENT)

struct State {
  std::mutex load_mu;  // guards cupti and registered
  Cupti cupti;
  bool registered = false;

  std::mutex mu;  // guards what follows
  bool collecting = false;
  std::vector<TraceRecord> records;
  int64_t dropped = 0;
};
State& state() {
  static State s;
  return s;
}

std::string cupti_error(const Cupti& c, CUptiResult r, const char* call) {
  const char* text = nullptr;
  if (c.result_string) c.result_string(r, &text);
  return str("kernel trace: ", call, " failed: ", text ? std::string(text) : str("CUPTI error ", static_cast<int>(r)));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(::operator new(kBufferBytes, std::align_val_t(kBufferAlign), std::nothrow));
  *size = *buffer ? kBufferBytes : 0;  // a zero size makes CUPTI drop the records (counted as dropped)
  *max_records = 0;                    // as many as fit
}

const char* memcpy_label(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy DtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "[memcpy HtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "[memcpy PtoP]";
    default: return "[memcpy]";
  }
}

// The fields read here (kind, start, end, streamId, name / copyKind) lead every version of the kernel, memcpy and
// memset records (Kernel4..10, Memcpy5..6, Memset4), so an older libcupti that writes an older version still parses;
// cuptiActivityGetNextRecord knows each record's size.
void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid_size) {
  State& s = state();
  const Cupti& c = s.cupti;  // set before any buffer can exist
  std::vector<TraceRecord> parsed;
  CUpti_Activity* record = nullptr;
  while (valid_size > 0 && c.next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    TraceRecord r;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        r = {RecordKind::kernel, k->name ? k->name : "(unknown)", k->start, k->end, k->streamId};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        r = {RecordKind::memcpy, memcpy_label(m->copyKind), m->start, m->end, m->streamId};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        r = {RecordKind::memset, "[memset]", m->start, m->end, m->streamId};
        break;
      }
      default: continue;
    }
    parsed.push_back(std::move(r));
  }
  size_t dropped = 0;
  if (c.num_dropped && c.num_dropped(ctx, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
  ::operator delete(buffer, std::align_val_t(kBufferAlign));
  const std::lock_guard<std::mutex> lock(s.mu);
  if (!s.collecting) return;  // a late buffer after trace_end
  s.records.insert(s.records.end(), std::make_move_iterator(parsed.begin()), std::make_move_iterator(parsed.end()));
  s.dropped += static_cast<int64_t>(dropped);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

// ---------------------------------------------------------------------------------------------------------------
// Kernel names.

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

bool opens(char c) { return c == '<' || c == '(' || c == '[' || c == '{'; }
bool closes(char c) { return c == '>' || c == ')' || c == ']' || c == '}'; }

// "void ns::f<A, B>(int, X<int>)" -> "ns::f<A, B>": the parameter list is the parenthesized group that ends the
// name, the return type whatever precedes the last space outside brackets.
std::string drop_signature(std::string s) {
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        s.resize(i);
        break;
      }
    }
  }
  int depth = 0;
  size_t name_start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (opens(s[i])) ++depth;
    else if (closes(s[i]) && depth > 0) --depth;
    else if (s[i] == ' ' && depth == 0) name_start = i + 1;
  }
  return s.substr(name_start);
}

// "a::b::f<c::T<d::U>>" -> "f<T<U>>": every qualifier (an identifier, or a template-id, followed by "::") goes.
std::string drop_qualifiers(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != ':' || i + 1 >= s.size() || s[i + 1] != ':') {
      out += s[i];
      continue;
    }
    if (!out.empty() && out.back() == '>') {  // a class template's scope: drop its arguments too
      int depth = 0;
      while (!out.empty()) {
        const char c = out.back();
        out.pop_back();
        if (c == '>') ++depth;
        if (c == '<' && --depth == 0) break;
      }
    }
    while (!out.empty() && ident_char(out.back())) out.pop_back();
    ++i;
  }
  return out;
}

std::string cap(std::string s) {
  if (s.size() > kMaxKernelNameChars) s = s.substr(0, kMaxKernelNameChars - 3) + "...";
  return s;
}

}  // namespace

std::vector<std::string> cupti_library_candidates() {
  std::vector<std::string> names;
  if (std::string lib = env::text("VLM_CUPTI_LIB"); !lib.empty()) names.push_back(std::move(lib));
  names.emplace_back("libcupti.so.13");
  names.emplace_back("libcupti.so");
  return names;
}

std::string short_kernel_name(const char* mangled) {
  if (!mangled) return "(unknown)";
  // Only function names ("_Z..."): __cxa_demangle also reads type manglings, so "b" alone would come back "bool".
  if (std::string_view(mangled).substr(0, 2) != "_Z") return cap(mangled);
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || !demangled) return cap(mangled);  // not a valid mangling
  std::string s = demangled;
  std::free(demangled);
  replace_all(s, "(anonymous namespace)::", "");
  s = drop_qualifiers(drop_signature(std::move(s)));
  replace_all(s, "> >", ">>");
  return cap(std::move(s));
}

TraceSummary summarize(std::vector<TraceRecord> records) {
  TraceSummary out;
  const auto invalid = std::remove_if(records.begin(), records.end(), [](const TraceRecord& r) {
    return r.start_ns == 0 || r.end_ns < r.start_ns;
  });
  out.invalid = records.end() - invalid;
  records.erase(invalid, records.end());
  if (records.empty()) return out;
  std::sort(records.begin(), records.end(),
            [](const TraceRecord& a, const TraceRecord& b) { return a.start_ns < b.start_ns; });

  // The union of the intervals in start order: a record starting past the current run's end closes the run.
  uint64_t busy = 0, summed = 0, run_start = records[0].start_ns, run_end = records[0].end_ns, last_end = 0;
  struct Sum {
    int64_t calls = 0;
    uint64_t ns = 0, max_ns = 0;
  };
  std::map<std::string, Sum> sums;
  std::map<std::string, std::string> short_names;  // mangled -> short, demangled once each
  for (const TraceRecord& r : records) {
    if (r.start_ns > run_end) {
      busy += run_end - run_start;
      run_start = r.start_ns;
    }
    run_end = std::max(run_end, r.end_ns);
    last_end = std::max(last_end, r.end_ns);
    const uint64_t ns = r.end_ns - r.start_ns;
    summed += ns;
    const std::string* name = &r.name;
    if (r.kind == RecordKind::kernel) {
      auto [it, fresh] = short_names.try_emplace(r.name);
      if (fresh) it->second = short_kernel_name(r.name.c_str());
      name = &it->second;
    }
    Sum& sum = sums[*name];
    ++sum.calls;
    sum.ns += ns;
    sum.max_ns = std::max(sum.max_ns, ns);
    if (r.kind == RecordKind::kernel) ++out.kernels;
    else if (r.kind == RecordKind::memcpy) ++out.memcpys;
    else ++out.memsets;
  }
  busy += run_end - run_start;

  const uint64_t window = last_end - records[0].start_ns;
  out.window_ms = static_cast<double>(window) / 1e6;
  out.busy_ms = static_cast<double>(busy) / 1e6;
  out.idle_ms = static_cast<double>(window - busy) / 1e6;
  out.concurrent_ms = static_cast<double>(summed - busy) / 1e6;
  for (const auto& [name, sum] : sums) {
    out.by_kernel.push_back({name, sum.calls, static_cast<double>(sum.ns) / 1e6,
                             static_cast<double>(sum.ns) / 1e3 / static_cast<double>(sum.calls),
                             static_cast<double>(sum.max_ns) / 1e3});
  }
  std::stable_sort(out.by_kernel.begin(), out.by_kernel.end(),
                   [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });  // ties stay by name
  return out;
}

Status trace_begin() {
  State& s = state();
  {
    const std::lock_guard<std::mutex> lock(s.mu);
    if (s.collecting) return invalid_argument("kernel trace: trace_begin while a trace is running");
  }
  const std::lock_guard<std::mutex> load_lock(s.load_mu);
  if (!s.cupti.handle) VLM_RETURN_IF_ERROR(load_cupti(s.cupti));
  const Cupti& c = s.cupti;
  if (!s.registered) {
    if (const CUptiResult r = c.register_callbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS)
      return internal_error(cupti_error(c, r, "cuptiActivityRegisterCallbacks"));
    s.registered = true;
  }
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return internal_error(str("kernel trace: cudaDeviceSynchronize: ", cudaGetErrorString(e)));
  {
    const std::lock_guard<std::mutex> lock(s.mu);
    s.records.clear();
    s.dropped = 0;
    s.collecting = true;
  }
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    if (const CUptiResult r = c.enable(kKinds[i]); r != CUPTI_SUCCESS) {
      for (size_t j = 0; j < i; ++j) c.disable(kKinds[j]);
      const std::lock_guard<std::mutex> lock(s.mu);
      s.collecting = false;
      return internal_error(cupti_error(c, r, "cuptiActivityEnable"));
    }
  }
  return Status();
}

Expected<TraceSummary> trace_end() {
  State& s = state();
  {
    const std::lock_guard<std::mutex> lock(s.mu);
    if (!s.collecting) return invalid_argument("kernel trace: trace_end without trace_begin");
  }
  const Cupti& c = s.cupti;
  const cudaError_t sync = cudaDeviceSynchronize();
  // Flush before disabling: the forced flush hands back every buffer, full or not, through buffer_completed.
  const CUptiResult flushed = c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (const CUpti_ActivityKind kind : kKinds) c.disable(kind);
  std::vector<TraceRecord> records;
  int64_t dropped = 0;
  {
    const std::lock_guard<std::mutex> lock(s.mu);
    s.collecting = false;
    records.swap(s.records);
    dropped = s.dropped;
  }
  if (sync != cudaSuccess) {
    return internal_error(str("kernel trace: cudaDeviceSynchronize: ", cudaGetErrorString(sync)));
  }
  if (flushed != CUPTI_SUCCESS) return internal_error(cupti_error(c, flushed, "cuptiActivityFlushAll"));
  TraceSummary summary = summarize(std::move(records));
  summary.dropped = dropped;
  return summary;
}

}  // namespace vlm::ops::trace
