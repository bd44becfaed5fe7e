// DI_CHECK: invariants that must hold whatever the input. A failure is a bug in deepinfer, not
// bad input, so it aborts loudly with file:line instead of returning a Status.
#pragma once

#include <cstdio>
#include <cstdlib>

#define DI_CHECK(cond, ...)                                                         \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      std::fprintf(stderr, "%s:%d: DI_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, "" __VA_ARGS__);                                         \
      std::fprintf(stderr, "\n");                                                   \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
