// families/qwen3_next/qwen3_5.hpp: MaxText models/qwen3_5.py, the text decoder of Qwen3.5 (decoder_block "qwen3_5").
//
// qwen3_5.py's Qwen3_5GatedDeltaNet, Qwen3_5FullAttention and Qwen3_5SparseMoEBlock subclass the Qwen3-Next classes
// without changing them, and Qwen3_5DecoderLayer / Qwen3_5ScannableBlock repeat Qwen3-Next's layer and scan block
// (the same parameter tree, `layer_j` when scanned). The layer is therefore Qwen3NextDecoderLayer itself; the registry
// builds qwen3_5 models as Transformer<P, Qwen3NextDecoderLayer>, so nothing is compiled twice. (Written as
// Transformer<P, Qwen3_5DecoderLayer>, the model works too, but clang treats the alias template as a template of its
// own there: another instantiation of the same code.) What differs lives in the config: the Qwen3.5 ymls set use_mrope with mrope_section
// [11, 11, 10], so the full-attention layers take MaxText's multimodal rotary embedding, which at text positions is a
// partial RoPE with f32 sin / cos (layers/rotary.hpp RopeKind::mrope).
#pragma once

#include "maxtext/families/qwen3_next/qwen3_next.hpp"

namespace maxtext::layers {

/// MaxText Qwen3_5DecoderLayer (decoder_block "qwen3_5"): Qwen3NextDecoderLayer.
template <class P>
using Qwen3_5DecoderLayer = Qwen3NextDecoderLayer<P>;

}  // namespace maxtext::layers
