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

// Compiled mode. Header-only by default: every function is `inline` and each translation unit that calls one compiles
// it. The heaviest non-template functions (reading configs and weight files, the importers' entry points, the
// tokenizers, the helpers every model unit calls: those marked MAXTEXT_API) may be compiled once instead: define
// MAXTEXT_COMPILED in every translation unit of a program and also MAXTEXT_COMPILED_IMPLEMENTATION in exactly one,
// which then holds their definitions; the others see declarations and link to them. This project's own programs build
// that way (CMake option MAXTEXT_COMPILED, library maxtext_compiled, docs/build.md); a user who only includes the
// headers needs neither macro.
#if defined(MAXTEXT_COMPILED)
#define MAXTEXT_API
#if defined(MAXTEXT_COMPILED_IMPLEMENTATION)
#define MAXTEXT_API_DEFINITIONS 1
#else
#define MAXTEXT_API_DEFINITIONS 0
#endif
#else
#define MAXTEXT_API inline
#define MAXTEXT_API_DEFINITIONS 1
#endif

// The CPU kernels' linkage (backend/cpu/qblock.hpp explains it): the block kernels and the entry points of the matrix
// products, attention and the Eigen product for the types the layers use. Inline (header-only), or, with
// MAXTEXT_SEPARATE_KERNELS, external and defined once, in the translation unit that defines
// MAXTEXT_KERNELS_IMPLEMENTATION (this project's library maxtext_kernels).
#if defined(MAXTEXT_SEPARATE_KERNELS)
#define MAXTEXT_KERNEL_API
#if defined(MAXTEXT_KERNELS_IMPLEMENTATION)
#define MAXTEXT_KERNEL_DEFINITIONS 1
#else
#define MAXTEXT_KERNEL_DEFINITIONS 0
#endif
#else
#define MAXTEXT_KERNEL_API inline
#define MAXTEXT_KERNEL_DEFINITIONS 1
#endif
