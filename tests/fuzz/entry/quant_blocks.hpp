// tests/fuzz/entry/quant_blocks.hpp: fuzz entry point for the decoding of quantised weight blocks: the ggml block
// types of core/ggml_quants.hpp (Q4_0 ... IQ4_XS, as io::dequantize_block_tensor decodes a GGUF tensor) and MXFP4
// (Hugging Face GPT-OSS `_blocks` + `_scales` pairs and llama.cpp's 17-byte blocks, families/gpt_oss/import.hpp).
// Byte 0 picks the format (its value modulo the 14 formats); byte 1 the layout: rows 1-4, blocks per row 1-2, and
// whether the claimed byte count or the scale tensor's shape is off by a little (which must be refused by name);
// the rest fills the blocks, cycling when short. Every decoded value is read.
#pragma once

#include <cstdint>
#include <vector>

#include "fuzz_common.hpp"
#include "maxtext/core/any_tensor.hpp"
#include "maxtext/core/ggml_quants.hpp"
#include "maxtext/families/gpt_oss/import.hpp"
#include "maxtext/io/gguf.hpp"

namespace maxtext::fuzz {

inline void fuzz_quant_blocks(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return;
  static constexpr quant::BlockType kTypes[] = {
      quant::BlockType::q4_0, quant::BlockType::q4_1, quant::BlockType::q5_0, quant::BlockType::q5_1,
      quant::BlockType::q8_0, quant::BlockType::q2_k, quant::BlockType::q3_k, quant::BlockType::q4_k,
      quant::BlockType::q5_k, quant::BlockType::q6_k, quant::BlockType::iq4_nl, quant::BlockType::iq4_xs};
  constexpr unsigned kFormats = sizeof(kTypes) / sizeof(kTypes[0]) + 2;  // + the two MXFP4 layouts
  const unsigned format = data[0] % kFormats;
  const std::int64_t rows = 1 + (data[1] & 3), blocks = 1 + ((data[1] >> 2) & 1);
  const bool size_off = (data[1] & 0x10) != 0, shape_off = (data[1] & 0x20) != 0;
  auto fill = [&](std::vector<std::uint8_t>& buf) {
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = size > 2 ? data[2 + i % (size - 2)] : 0;
  };
  double acc = 0;
  auto read_all = [&](const AnyTensor& t) {
    for (std::int64_t i = 0; i < t.numel(); ++i) acc += t.element(i);
  };
  if (format < kFormats - 2) {
    const quant::BlockFormat& f = quant::block_format(kTypes[format]);
    std::vector<std::uint8_t> buf(static_cast<std::size_t>(rows * blocks * f.bytes));
    fill(buf);
    io::GgufBlockTensor b;
    b.name = "fuzz";
    b.shape = {rows, blocks * f.block};
    b.type = f.type;
    b.data = reinterpret_cast<const std::byte*>(buf.data());
    b.bytes = buf.size() - (size_off ? 1 : 0);  // one byte short: the size check must refuse it before decoding
    attempt([&] { read_all(io::dequantize_block_tensor(b, "fuzz.gguf")); });
  } else if (format == kFormats - 2) {  // Hugging Face MXFP4: blocks [E, R, G, 16] u8, scales [E, R, G] u8
    std::vector<std::uint8_t> blk(static_cast<std::size_t>(2 * rows * blocks * 16)), sc(static_cast<std::size_t>(2 * rows * blocks));
    fill(blk);
    for (std::size_t i = 0; i < sc.size(); ++i) sc[i] = blk[(7 * i) % blk.size()];
    AnyTensor bt, st;
    bt.dtype = st.dtype = DType::u8;
    bt.shape = {2, rows, blocks, 16};
    st.shape = {2, rows, shape_off ? blocks + 1 : blocks};  // a scale tensor of the wrong shape must be refused
    bt.strides = AnyTensor::dense_strides(bt.shape, bt.dtype);
    st.strides = AnyTensor::dense_strides(st.shape, st.dtype);
    if (shape_off) sc.resize(sc.size() + static_cast<std::size_t>(2 * rows));
    bt.data = reinterpret_cast<const std::byte*>(blk.data());
    st.data = reinterpret_cast<const std::byte*>(sc.data());
    bt.source = st.source = "fuzz";
    attempt([&] { read_all(io::dequantize_mxfp4(bt, st, "fuzz")); });
  } else {  // llama.cpp's MXFP4 blocks: [E, R, G, 17] u8 (one e8m0 scale byte, 16 bytes of nibbles)
    std::vector<std::uint8_t> raw(static_cast<std::size_t>(2 * rows * blocks * 17));
    fill(raw);
    AnyTensor t;
    t.dtype = DType::u8;
    t.shape = {2, rows, blocks, shape_off ? 16 : 17};
    t.strides = AnyTensor::dense_strides(t.shape, t.dtype);
    t.data = reinterpret_cast<const std::byte*>(raw.data());
    t.source = "fuzz";
    attempt([&] { read_all(io::dequantize_ggml_mxfp4(t, "fuzz")); });
  }
  volatile double sink = acc;
  (void)sink;
}

}  // namespace maxtext::fuzz
