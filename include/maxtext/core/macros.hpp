// core/macros.hpp: portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MAXTEXT_HD __host__ __device__
#define MAXTEXT_DEVICE_COMPILE 1
#else
#define MAXTEXT_HD
#endif

#if defined(_MSC_VER)
#define MAXTEXT_INLINE __forceinline
#else
#define MAXTEXT_INLINE inline __attribute__((always_inline))
#endif

// Register tiles only stay in registers when their loops over rows and vectors are fully unrolled, whatever -O level
// the including program uses.
#if defined(__clang__)
#define MAXTEXT_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define MAXTEXT_UNROLL _Pragma("GCC unroll 16")
#else
#define MAXTEXT_UNROLL
#endif

#if !defined(NDEBUG) || defined(MAXTEXT_DEBUG_ASSERTS)
#include <cstdio>
#include <cstdlib>
/// Kernel-internal invariant check; compiled out of release builds (validation happens at layer entry).
#define MAXTEXT_DASSERT(cond)                                                                   \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "%s:%d: MAXTEXT_DASSERT(%s) failed\n", __FILE__, __LINE__, #cond);   \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)
#else
#define MAXTEXT_DASSERT(cond) ((void)0)
#endif
