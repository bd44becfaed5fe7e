# CUDA backend (DEEPINFER_ACCELERATOR=nvidia): Hopper sm_90, nvcc from /usr/local/cuda by default.
#
# Notes for CMake 3.25 + nvcc 13:
#  * CMake 3.25 does not know that nvcc 13 supports C++20 (CUDA_STANDARD 20 is a generate-time
#    error), so -std=c++20 is passed to nvcc explicitly below and CMAKE_CUDA_STANDARD is not set.
#  * CMAKE_CUDA_ARCHITECTURES is set before enable_language(CUDA); otherwise CMake would use nvcc
#    13's default (sm_75) for every target.
#  * The top-level warning/optimisation flags are restricted to CXX; the CUDA equivalents are here.

if(NOT CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
# One CUDA runtime: the shared libcudart that CUDA::cudart names. (CMake's default, Static, would
# also put -lcudart_static on every link line that involves CUDA objects.)
if(NOT CMAKE_CUDA_RUNTIME_LIBRARY)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
endif()
if(NOT CMAKE_CUDA_HOST_COMPILER)
  set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# With no CUDA_STANDARD set, CMake falls back to the C++ settings (CXX_STANDARD 20 +
# CXX_STANDARD_REQUIRED ON) and then refuses to generate ("requires the language dialect CUDA20"),
# because CMake 3.25 has no CUDA20 flag for nvcc. Declare the dialect as needing no flag from CMake
# (we pass -std=c++20 ourselves below). A newer CMake that knows the flag keeps its own; nvcc
# accepts the repeated -std=c++20.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "")
endif()

# Flags for every CUDA compilation in this project: C++20, host-compiler warnings as errors,
# nvcc/ptxas warnings as errors, no silent FMA contraction in host code (as for CXX).
set(DEEPINFER_CUDA_FLAGS
  -std=c++20
  -Xcompiler=-Wall,-Wextra,-Werror,-ffp-contract=off
  --Werror=all-warnings)
if(DEEPINFER_CUDA_LINEINFO)
  list(APPEND DEEPINFER_CUDA_FLAGS -lineinfo)
endif()
if(DEEPINFER_SANITIZE)
  # Sanitizers instrument host code only; device code is not instrumented. (-Xcompiler splits its
  # argument at commas, so -fsanitize=address,undefined must be given as two flags.)
  list(APPEND DEEPINFER_CUDA_FLAGS
    -Xcompiler=-fsanitize=address -Xcompiler=-fsanitize=undefined
    -Xcompiler=-fno-sanitize-recover=all,-fno-omit-frame-pointer)
endif()

# Kernel families, each its own library so that its tests build and run alone.
function(deepinfer_cuda_part name)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${DEEPINFER_CUDA_FLAGS}>")
  target_link_libraries(${name} PUBLIC CUDA::cudart)
endfunction()
# The GEMMs: mma.sync tiles (gemm.cu) and the TMA + wgmma large-M tiles (gemm_wgmma.cu), which need
# the architecture-specific sm_90a target (wgmma.mma_async exists only there).
deepinfer_cuda_part(deepinfer_cuda_gemm src/backend/cuda/gemm.cu src/backend/cuda/gemm_wgmma.cu)
set_target_properties(deepinfer_cuda_gemm PROPERTIES CUDA_ARCHITECTURES 90a)
# Sink attention and the indexer; the 64-head attention CTAs run on wgmma (attention_wgmma.cu: sm_90a).
deepinfer_cuda_part(deepinfer_cuda_attention src/backend/cuda/attention.cu src/backend/cuda/attention_wgmma.cu)
set_target_properties(deepinfer_cuda_attention PROPERTIES CUDA_ARCHITECTURES 90a)
deepinfer_cuda_part(deepinfer_cuda_ops src/backend/cuda/ops.cu src/backend/cuda/hc_post_dots.cu src/backend/cuda/sampling.cu)
# The FP8 KV cache: FP8 KV row / FP4 indexer key encoders and the release indexer over FP4 keys (the
# attention-side readers live in deepinfer_cuda_attention).
deepinfer_cuda_part(deepinfer_cuda_kv_fp8 src/backend/cuda/kv_fp8.cu)
target_link_libraries(deepinfer_cuda_kv_fp8 PUBLIC deepinfer_cuda_attention)
# Block-scaled FP8 GEMMs (FP8 / FP4 checkpoint weights, release numerics) and the FP8 activation
# quantizer; the TMA + wgmma FP8 GEMM (fp8_wgmma.cu) runs release numerics with CudaModelOptions::fp8_gemm.
deepinfer_cuda_part(deepinfer_cuda_fp8_gemm src/backend/cuda/fp8_gemm.cu src/backend/cuda/fp8_wgmma.cu)
set_target_properties(deepinfer_cuda_fp8_gemm PROPERTIES CUDA_ARCHITECTURES 90a)  # fp8_wgmma.cu: wgmma

# The V4 forward on the GPU (device weights, device state cache, step orchestration).
deepinfer_cuda_part(deepinfer_backend_cuda src/backend/cuda/cuda_model.cu src/backend/cuda/cuda_model_weights.cu src/backend/cuda/v4_kernels.cu
                    src/backend/cuda/release_kernels.cu)
target_link_libraries(deepinfer_backend_cuda PUBLIC deepinfer_cuda_gemm deepinfer_cuda_attention deepinfer_cuda_ops
                                                    deepinfer_cuda_kv_fp8 deepinfer_cuda_fp8_gemm deepinfer_model)

# The engine can run its steps on the GPU (EngineOptions::device = "cuda").
if(TARGET deepinfer_engine)
  target_link_libraries(deepinfer_engine PUBLIC deepinfer_backend_cuda)
  target_compile_definitions(deepinfer_engine PUBLIC DEEPINFER_WITH_CUDA)
endif()

if(DEEPINFER_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
  # Same cache variable as tests/CMakeLists.txt (the GPU-only tree does not read that file).
  set(DEEPINFER_FIXTURES_DIR "${PROJECT_SOURCE_DIR}/../shared/fixtures" CACHE PATH "reference fixtures")
  # PRE_TEST: the test list is read when ctest runs, never by running the binary at build time
  # (building happens on machines without a GPU).
  function(deepinfer_cuda_test name)
    add_executable(${name} ${ARGN})
    target_link_libraries(${name} PRIVATE deepinfer_backend_cuda GTest::gtest_main)
    target_compile_definitions(${name} PRIVATE
      DEEPINFER_FIXTURES_DIR="${DEEPINFER_FIXTURES_DIR}"
      DEEPINFER_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
      DEEPINFER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
    gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60 PROPERTIES LABELS cuda)
  endfunction()
  deepinfer_cuda_test(deepinfer_cuda_gemm_tests tests/cuda/gemm_test.cc)
  deepinfer_cuda_test(deepinfer_cuda_attention_tests tests/cuda/attention_test.cc)
  deepinfer_cuda_test(deepinfer_cuda_ops_tests tests/cuda/ops_test.cc)
  deepinfer_cuda_test(deepinfer_cuda_model_tests tests/cuda/model_test.cc)
  deepinfer_cuda_test(deepinfer_cuda_fixture_tests tests/cuda/fixture_test.cc)
  deepinfer_cuda_test(deepinfer_cuda_kv_fp8_tests tests/cuda/kv_fp8_test.cc)
  deepinfer_cuda_test(deepinfer_cuda_fp8_gemm_tests tests/cuda/fp8_gemm_test.cc)
  target_link_libraries(deepinfer_cuda_fp8_gemm_tests PRIVATE deepinfer_cuda_fp8_gemm)
endif()

# GPU benchmarks (run by tools/gpu/run_all.sh on the H200).
add_executable(deepinfer_bench_gemm bench/cuda/gemm_bench.cc)
target_link_libraries(deepinfer_bench_gemm PRIVATE deepinfer_cuda_gemm CUDA::cublas)
add_executable(deepinfer_bench_model bench/cuda/model_bench.cc bench/cuda/kernel_trace.cc)
target_link_libraries(deepinfer_bench_model PRIVATE deepinfer_backend_cuda)
# --trace (kernel timelines through CUPTI's activity API) where the toolkit has CUPTI.
if(TARGET CUDA::cupti)
  target_link_libraries(deepinfer_bench_model PRIVATE CUDA::cupti)
  target_compile_definitions(deepinfer_bench_model PRIVATE DEEPINFER_BENCH_CUPTI)
endif()
add_executable(deepinfer_bench_attention bench/cuda/attention_bench.cc)
target_link_libraries(deepinfer_bench_attention PRIVATE deepinfer_cuda_attention)
add_executable(deepinfer_bench_fp8_gemm bench/cuda/fp8_gemm_bench.cc)
target_link_libraries(deepinfer_bench_fp8_gemm PRIVATE deepinfer_cuda_fp8_gemm)

