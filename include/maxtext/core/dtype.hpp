// core/dtype.hpp: scalar types (bf16, fp16, fp8 e4m3, Q8_0 blocks), the DType tag and conversions.
// Conversions to the narrow types round to nearest, ties to even, as jnp.astype and torch do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "maxtext/core/macros.hpp"

namespace maxtext {

namespace detail {
// The intrinsics exist in device code only (__CUDA_ARCH__), not in nvcc's host pass.
MAXTEXT_HD inline std::uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
MAXTEXT_HD inline float bits_f32(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace detail

/// bfloat16: the upper half of an IEEE binary32. Conversion from float rounds to nearest even; NaN stays NaN.
struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  MAXTEXT_HD explicit bf16(float f) : bits(round_bits(f)) {}
  MAXTEXT_HD explicit operator float() const { return detail::bits_f32(static_cast<std::uint32_t>(bits) << 16); }
  MAXTEXT_HD static bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  MAXTEXT_HD static std::uint16_t round_bits(float f) {
    std::uint32_t u = detail::f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
  }
  friend MAXTEXT_HD bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
};

/// IEEE binary16. Conversion from float rounds to nearest even (subnormals included); overflow gives inf.
struct fp16 {
  std::uint16_t bits = 0;

  fp16() = default;
  MAXTEXT_HD explicit fp16(float f) : bits(from_float_bits(f)) {}
  MAXTEXT_HD explicit operator float() const { return to_float(bits); }
  MAXTEXT_HD static fp16 from_bits(std::uint16_t b) {
    fp16 h;
    h.bits = b;
    return h;
  }
  MAXTEXT_HD static float to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    const std::uint32_t man = h & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
      const float v = static_cast<float>(man) * 5.9604644775390625e-08f;
      return (sign != 0u) ? -v : v;
    }
    if (exp == 31) return detail::bits_f32(sign | 0x7f800000u | (man << 13));
    return detail::bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
  }
  MAXTEXT_HD static std::uint16_t from_float_bits(float f) {
    const std::uint32_t u = detail::f32_bits(f);
    const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (a < 0x38800000u) {  // below the smallest normal (2^-14): subnormal or zero
      if (a < 0x33000000u) return sign;  // < 2^-25 rounds to zero (exactly 2^-25 ties to even = 0)
      const std::uint32_t e = a >> 23;
      const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
      const std::uint32_t shift = 126u - e;  // value = m * 2^(e-150); want units of 2^-24
      std::uint32_t q = m >> shift;
      const std::uint32_t rem = m & ((1u << shift) - 1u);
      const std::uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (q & 1u))) ++q;
      return static_cast<std::uint16_t>(sign | q);
    }
    std::uint32_t v = a - 0x38000000u;  // rebias exponent 127 -> 15
    v += 0xfffu + ((v >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (v >> 13));
  }
  friend MAXTEXT_HD bool operator==(fp16 a, fp16 b) { return a.bits == b.bits; }
};

/// FP8 e4m3 (OCP "e4m3fn": no infinities, 0x7f/0xff are NaN), as in DeepSeek-V3's released weights. Decode only.
struct fp8_e4m3 {
  std::uint8_t bits = 0;
  MAXTEXT_HD explicit operator float() const {
    const std::uint32_t sign = bits & 0x80u;
    const std::uint32_t exp = (bits >> 3) & 0xfu;
    const std::uint32_t man = bits & 0x7u;
    float v;
    if (exp == 0xfu && man == 0x7u) {
      v = detail::bits_f32(0x7fc00000u);
    } else if (exp == 0) {
      v = static_cast<float>(man) * 0.001953125f;  // man * 2^-9
    } else {
      v = detail::bits_f32(((exp + 120u) << 23) | (man << 20));
    }
    return sign ? -v : v;
  }
};

/// GGUF/llama.cpp Q8_0 block: 32 int8 values sharing one fp16 scale; value = d * qs[i].
struct q8_0 {
  static constexpr int block = 32;
  fp16 d;
  std::int8_t qs[block];
};
static_assert(sizeof(q8_0) == 34, "Q8_0 block must be 34 bytes as in GGUF");

/// One byte of a runtime-typed ggml tensor: a matrix stored as llama.cpp stores it, each row a run of blocks of the
/// matrix's own ggml type (F32, F16, BF16, Q8_0, Q4_K, Q6_K, ...; core/ggml_quants.hpp). The type is a runtime
/// property of the matrix (Matrix::ggml_type, AnyTensor::ggml_type), so that one model holds the mix of types a
/// Q4_K_M file has. As a policy's weight type it means "every matrix in the type the file gave it".
struct ggml_byte {
  std::uint8_t bits;
};
static_assert(sizeof(ggml_byte) == 1, "ggml_byte is one byte");

/// Element type tags for type-erased tensors (file formats, the Any tensor of io/).
/// DType::ggml is a runtime-typed ggml tensor (see ggml_byte): its AnyTensor strides count elements, not bytes.
enum class DType : std::uint8_t { f64, f32, f16, bf16, f8_e4m3, i64, i32, i16, i8, u8, boolean, q8_0, ggml };

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8_e4m3: return "f8_e4m3";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::i16: return "i16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
    case DType::q8_0: return "q8_0";
    case DType::ggml: return "ggml";
  }
  return "?";
}

/// Bytes per element; for block types, bytes per block (see dtype_block).
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: case DType::i16: return 2;
    case DType::f8_e4m3: case DType::i8: case DType::u8: case DType::boolean: return 1;
    case DType::q8_0: return sizeof(q8_0);
    case DType::ggml: return 1;  // bytes of a block row; offsets go through the matrix's ggml type
  }
  return 0;
}
/// Elements per storage unit: 32 for Q8_0, 1 otherwise.
constexpr std::int64_t dtype_block(DType t) { return t == DType::q8_0 ? q8_0::block : 1; }
constexpr bool dtype_is_float(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f8_e4m3;
}
constexpr bool dtype_is_int(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i16 || t == DType::i8 || t == DType::u8 ||
         t == DType::boolean;
}

template <class T> struct dtype_of_t;
template <> struct dtype_of_t<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of_t<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of_t<fp16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of_t<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of_t<fp8_e4m3> { static constexpr DType value = DType::f8_e4m3; };
template <> struct dtype_of_t<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of_t<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of_t<std::int16_t> { static constexpr DType value = DType::i16; };
template <> struct dtype_of_t<std::int8_t> { static constexpr DType value = DType::i8; };
template <> struct dtype_of_t<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of_t<bool> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of_t<q8_0> { static constexpr DType value = DType::q8_0; };
template <> struct dtype_of_t<ggml_byte> { static constexpr DType value = DType::ggml; };
template <class T> inline constexpr DType dtype_of = dtype_of_t<std::remove_cv_t<T>>::value;

/// The scalar element types a layer can store activations or weights in (block types excluded).
template <class T>
concept FloatElement = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> ||
                       std::is_same_v<T, fp16>;

/// Convert any scalar element to float (exact for every narrow type).
template <class T>
MAXTEXT_HD inline float to_float(T v) {
  return static_cast<float>(v);
}
/// Convert float to T with round-to-nearest-even.
template <class T>
MAXTEXT_HD inline T from_float(float v) {
  return T(v);
}
/// Round a float to T's precision and back (identity for float): the "cast to dtype" of MaxText.
template <class T>
MAXTEXT_HD inline float round_to(float v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<float>(T(v));
  }
}

}  // namespace maxtext
