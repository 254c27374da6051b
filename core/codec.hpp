// Parameter encodings for the wire (`--codec`). Each exchange sends one encoded snapshot each
// way, and *both* sides mix the decoded values (x̂, ŷ), never the exact ones: the initiator
// applies x += w (ŷ - x̂) and the responder y += w' (x̂ - ŷ), so every exchange still conserves
// the weighted sum exactly, and what quantisation dropped stays in each peer's own live
// parameters instead of being lost (it is sent the next time the difference shows).
//
// Stateless codecs:
//   none  float32 as is                                  4 bytes per value
//   fp16  IEEE 754 half, round to nearest even, clamped  2 bytes per value (|err| <= 2^-11 |v|)
//   int8  blocks of 256 values: one float32 scale        ~1.016 bytes per value
//         (max |v| / 127) then round(v / scale) as int8   (|err| <= scale / 2 per block)
// The int4 codec (`int4`) is stateful per pair, like topk: it sends Q4(x - ref), the change
// since what the partner last decoded of this model, with the references kept per partner by
// Gossip (core/codec_refs.hpp). Its quantiser is the stateless Q4 below:
//   Q4    blocks of 64 values: one float32 scale           0.5625 bytes per value
//         (max |v| / 7) then round(v / scale) in [-7, 7],
//         two levels per byte (even index: low nibble)    (|err| <= scale / 2 per block)
// The sparse codec (top-k of the change since the last exchange with that neighbour, CHOCO-SGD
// style) is stateful per pair: see core/sparse.hpp.
#pragma once
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "core/message.hpp"

namespace rumor {

enum class PayloadCodec : std::uint8_t { None = 0, Fp16 = 1, Int8 = 2, TopK = 3, Int4 = 4, Auto = 5 };
// The largest codec on the wire. Auto is a setting, never sent: a peer set to it picks one of
// kAutoCodecs for each exchange it starts (Gossip::note_round_trip), and answers a request in
// the request's codec when that is one of them.
constexpr std::uint8_t kMaxPayloadCodec = 4;
// What codec auto chooses from, the lightest first: each takes about half the bytes of the one
// before (4, 2 and 1.016 bytes per parameter).
constexpr PayloadCodec kAutoCodecs[] = {PayloadCodec::None, PayloadCodec::Fp16, PayloadCodec::Int8};
constexpr PayloadCodec kLightestAuto = kAutoCodecs[std::size(kAutoCodecs) - 1];  // a new link's first codec
// c's index in kAutoCodecs, or std::size(kAutoCodecs) where auto does not choose it.
constexpr std::size_t auto_codec_slot(PayloadCodec c) {
  std::size_t k = 0;
  while (k < std::size(kAutoCodecs) && kAutoCodecs[k] != c) ++k;
  return k;
}
constexpr bool auto_codec_choice(PayloadCodec c) { return auto_codec_slot(c) < std::size(kAutoCodecs); }

const char* codec_name(PayloadCodec c);
// "none", "fp16", "int8", "int4", "topk", "auto" -> codec; throws std::invalid_argument listing them.
PayloadCodec parse_codec(const std::string& s);

constexpr std::size_t kInt8Block = 256;
constexpr std::size_t kInt4Block = 64;

// Encoded size of n values (stateless codecs; for Int4, the Q4 quantiser of whatever vector
// it is given: the int4 codec's residual x - ref).
std::size_t encoded_size(PayloadCodec c, std::size_t n);
// Encodes `x` (stateless codecs and Q4 only).
Bytes encode_dense(PayloadCodec c, std::span<const float> x);
// Decodes into `out` (size n). Throws DecodeError (core/serial.hpp) if the byte count is
// wrong for n values (and, Q4, on a scale that is negative or not finite, a level of -8 or a
// padding nibble that is not 0: bytes our encoder never makes); a non-finite int8 scale is
// caught by the caller's finiteness check. On a throw `out` may be partly written.
void decode_dense(PayloadCodec c, std::span<const std::uint8_t> bytes, std::span<float> out);

std::uint16_t float_to_half(float f);
float half_to_float(std::uint16_t h);

}  // namespace rumor
