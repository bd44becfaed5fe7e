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
if(DEEPINFER_SANITIZE)
  # Sanitizers instrument host code only; device code is not instrumented. (-Xcompiler splits its
  # argument at commas, so -fsanitize=address,undefined must be given as two flags.)
  list(APPEND DEEPINFER_CUDA_FLAGS
    -Xcompiler=-fsanitize=address -Xcompiler=-fsanitize=undefined
    -Xcompiler=-fno-sanitize-recover=all,-fno-omit-frame-pointer)
endif()

add_library(deepinfer_backend_cuda STATIC src/backend/cuda/rms_norm.cu)
target_include_directories(deepinfer_backend_cuda PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_compile_options(deepinfer_backend_cuda PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${DEEPINFER_CUDA_FLAGS}>")
target_link_libraries(deepinfer_backend_cuda PUBLIC CUDA::cudart)

if(DEEPINFER_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
  add_executable(deepinfer_cuda_tests tests/cuda/rms_norm_test.cc)
  target_link_libraries(deepinfer_cuda_tests PRIVATE deepinfer_backend_cuda GTest::gtest_main)
  # PRE_TEST: the test list is read when ctest runs, never by running the binary at build time
  # (building happens on machines without a GPU).
  gtest_discover_tests(deepinfer_cuda_tests DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60 PROPERTIES LABELS cuda)
endif()
