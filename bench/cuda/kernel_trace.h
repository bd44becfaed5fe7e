// Kernel timeline of a bracketed region through CUPTI's activity API (concurrent-kernel records:
// kernels are not serialized, so programmatic dependent launches still overlap and CUDA graph
// replays keep their shape). For the benchmarks only: where a graphed decode step's time goes
// between and inside its kernels, which serialized per-kernel profiles (ncu) cannot show.
//
// Usage: KernelTrace t; t.start(); ...work...; cudaDeviceSynchronize(); t.stop(label, file);
// `file` gets one JSON line per kernel:
//   {"kind":"trace","case":LABEL,"name":"...","start_ns":...,"end_ns":...,"grid":[x,y,z],"block":[x,y,z],"graph_node":N}
// start_ns and end_ns are relative to the region's first kernel start. Without CUPTI in the build
// (DEEPINFER_BENCH_CUPTI undefined), start() reports that it cannot trace and stop() writes nothing.
#pragma once

#include <cstdio>
#include <string>

namespace deepinfer::bench {

class KernelTrace {
 public:
  // Starts recording kernel activity. Returns false (with a message in *error) when tracing is not
  // available in this build or CUPTI refuses.
  bool start(std::string* error);
  // Flushes the region's records and writes them to `out` as JSON lines tagged `label`. Returns the
  // number of kernels written (-1 when not started).
  int stop(const std::string& label, std::FILE* out);

 private:
  bool started_ = false;
};

}  // namespace deepinfer::bench
