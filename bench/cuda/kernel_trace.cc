#include "kernel_trace.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#ifdef DEEPINFER_BENCH_CUPTI
#include <cupti.h>
#include <cxxabi.h>
#endif

namespace deepinfer::bench {

#ifdef DEEPINFER_BENCH_CUPTI
namespace {

struct KernelRecord {
  std::string name;
  uint64_t start, end, graph_node;
  int grid[3], block[3];
};

// CUPTI hands finished buffers to a callback (possibly on its own thread): the records are copied
// out there, names included (CUPTI owns the strings).
std::mutex g_mutex;
std::vector<KernelRecord> g_records;
constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

std::string demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelRecord> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.push_back({demangled(k->name), k->start, k->end, k->graphNodeId, {k->gridX, k->gridY, k->gridZ},
                   {k->blockX, k->blockY, k->blockZ}});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.insert(g_records.end(), got.begin(), got.end());
}

std::string cupti_error(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s != nullptr ? s : "unknown CUPTI error";
}

// JSON string body: quotes, backslashes and control characters escaped.
std::string json_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    out += c;
  }
  return out;
}

}  // namespace

bool KernelTrace::start(std::string* error) {
  static bool registered = false;
  if (!registered) {
    const CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      *error = "cuptiActivityRegisterCallbacks: " + cupti_error(r);
      return false;
    }
    registered = true;
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_records.clear();
  }
  const CUptiResult r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    *error = "cuptiActivityEnable(CONCURRENT_KERNEL): " + cupti_error(r);
    return false;
  }
  started_ = true;
  return true;
}

int KernelTrace::stop(const std::string& label, std::FILE* out) {
  if (!started_) return -1;
  started_ = false;
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // every buffer, complete or not, to buffer_completed
  std::vector<KernelRecord> records;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    records.swap(g_records);
  }
  std::sort(records.begin(), records.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  const uint64_t t0 = records.empty() ? 0 : records.front().start;
  for (const KernelRecord& k : records)
    std::fprintf(out,
                 "{\"kind\":\"trace\",\"case\":\"%s\",\"name\":\"%s\",\"start_ns\":%llu,\"end_ns\":%llu,"
                 "\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"graph_node\":%llu}\n",
                 json_escaped(label).c_str(), json_escaped(k.name).c_str(),
                 static_cast<unsigned long long>(k.start - t0), static_cast<unsigned long long>(k.end - t0), k.grid[0],
                 k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2],
                 static_cast<unsigned long long>(k.graph_node));
  std::fflush(out);
  return static_cast<int>(records.size());
}

#else

bool KernelTrace::start(std::string* error) {
  *error = "this build has no CUPTI (CUDA::cupti not found when it was configured)";
  return false;
}

int KernelTrace::stop(const std::string&, std::FILE*) { return -1; }

#endif

}  // namespace deepinfer::bench
