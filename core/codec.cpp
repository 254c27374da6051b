// The dense codecs (codec.hpp): their names, fp16 (IEEE half, round to nearest even) and int8
// (one float scale per 256-value block, max |x| / 127) encoding and decoding of a snapshot, and
// Q4 (one float scale per 64-value block, max |x| / 7), the int4 codec's quantiser of x - ref.
// Only the bytes: which values are mixed is Gossip's business, and topk is core/sparse.cpp.
#include "core/codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "core/check.hpp"
#include "core/serial.hpp"

namespace rumor {

namespace {
// The largest Q4 scale: 7 x it stays finite.
const float kMaxInt4Scale = std::nextafter(std::numeric_limits<float>::max() / 7.0f, 0.0f);
}  // namespace

const char* codec_name(PayloadCodec c) {
  switch (c) {
    case PayloadCodec::None: return "none";
    case PayloadCodec::Fp16: return "fp16";
    case PayloadCodec::Int8: return "int8";
    case PayloadCodec::TopK: return "topk";
    case PayloadCodec::Int4: return "int4";
    case PayloadCodec::Auto: return "auto";
  }
  return "?";
}

PayloadCodec parse_codec(const std::string& s) {
  if (s == "none") return PayloadCodec::None;
  if (s == "fp16") return PayloadCodec::Fp16;
  if (s == "int8") return PayloadCodec::Int8;
  if (s == "int4") return PayloadCodec::Int4;
  if (s == "topk") return PayloadCodec::TopK;
  if (s == "auto") return PayloadCodec::Auto;
  throw std::invalid_argument("unknown codec '" + s + "': expected none, fp16, int8, int4, topk or auto");
}

std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t mag = x & 0x7FFFFFFFu;
  if (mag >= 0x7F800000u) return static_cast<std::uint16_t>(sign | (mag > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (mag >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7BFFu);  // clamp to 65504
  if (mag < 0x38800000u) {                                                     // subnormal half
    if (mag < 0x33000000u) return static_cast<std::uint16_t>(sign);            // rounds to 0
    const std::uint32_t e = mag >> 23;
    const std::uint32_t m = (mag & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126 - e;  // 14 + (113 - e)... so that value = m >> shift
    std::uint32_t h = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  // Normal: rebias exponent 127 -> 15, round the mantissa 23 -> 10 bits to nearest even.
  std::uint32_t h = ((mag - 0x38000000u) >> 13);
  const std::uint32_t rem = mag & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FFu;
  std::uint32_t x;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else {  // subnormal: value = m * 2^-24
      float f = static_cast<float>(m) * 0x1.0p-24f;
      std::memcpy(&x, &f, 4);
      x |= sign;
    }
  } else if (e == 31) {
    x = sign | 0x7F800000u | (m << 13);
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::size_t encoded_size(PayloadCodec c, std::size_t n) {
  switch (c) {
    case PayloadCodec::None: return 4 * n;
    case PayloadCodec::Fp16: return 2 * n;
    case PayloadCodec::Int8: return n + 4 * ((n + kInt8Block - 1) / kInt8Block);
    case PayloadCodec::Int4: return (n + 1) / 2 + 4 * ((n + kInt4Block - 1) / kInt4Block);
    case PayloadCodec::TopK:
    case PayloadCodec::Auto: break;
  }
  RUMOR_CHECK(false, "encoded_size: not a stateless codec");
  return 0;
}

Bytes encode_dense(PayloadCodec c, std::span<const float> x) {
  const std::size_t n = x.size();
  Bytes b(encoded_size(c, n));
  switch (c) {
    case PayloadCodec::None:
      std::memcpy(b.data(), x.data(), 4 * n);
      break;
    case PayloadCodec::Fp16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = float_to_half(x[i]);
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
      break;
    case PayloadCodec::Int8: {
      const std::size_t blocks = (n + kInt8Block - 1) / kInt8Block;
      auto* q = reinterpret_cast<std::int8_t*>(b.data() + 4 * blocks);
      for (std::size_t k = 0; k < blocks; ++k) {
        const std::size_t lo = k * kInt8Block, hi = std::min(n, lo + kInt8Block);
        float mx = 0;
        for (std::size_t i = lo; i < hi; ++i) mx = std::max(mx, std::abs(x[i]));
        const float scale = mx > 0 ? mx / 127.0f : 0.0f;
        std::memcpy(b.data() + 4 * k, &scale, 4);
        const float inv = scale > 0 ? 1.0f / scale : 0.0f;
        for (std::size_t i = lo; i < hi; ++i) {
          const float r = std::nearbyint(x[i] * inv);
          q[i] = static_cast<std::int8_t>(std::clamp(r, -127.0f, 127.0f));
        }
      }
      break;
    }
    case PayloadCodec::Int4: {
      const std::size_t blocks = (n + kInt4Block - 1) / kInt4Block;
      std::uint8_t* q = b.data() + 4 * blocks;
      std::fill(q, q + (n + 1) / 2, std::uint8_t{0});
      for (std::size_t k = 0; k < blocks; ++k) {
        const std::size_t lo = k * kInt4Block, hi = std::min(n, lo + kInt4Block);
        float mx = 0;
        for (std::size_t i = lo; i < hi; ++i) mx = std::max(mx, std::abs(x[i]));
        // At most kMaxInt4Scale, so that 7 x scale is finite (what the decoder insists on).
        const float scale = mx > 0 && std::isfinite(mx) ? std::min(mx / 7.0f, kMaxInt4Scale) : 0.0f;
        std::memcpy(b.data() + 4 * k, &scale, 4);
        const float inv = scale > 0 ? 1.0f / scale : 0.0f;
        for (std::size_t i = lo; i < hi; ++i) {
          const float r = std::clamp(std::nearbyint(x[i] * inv), -7.0f, 7.0f);
          const auto level = static_cast<std::uint8_t>(static_cast<std::int8_t>(r)) & 0x0Fu;
          q[i / 2] |= static_cast<std::uint8_t>(i % 2 == 0 ? level : level << 4);
        }
      }
      break;
    }
    case PayloadCodec::TopK:
    case PayloadCodec::Auto:
      RUMOR_CHECK(false, "encode_dense: not a stateless codec");
  }
  return b;
}

void decode_dense(PayloadCodec c, std::span<const std::uint8_t> b, std::span<float> out) {
  const std::size_t n = out.size();
  if (b.size() != encoded_size(c, n))
    throw DecodeError(std::string(codec_name(c)) + " payload of " + std::to_string(b.size()) + " bytes, expected " +
                      std::to_string(encoded_size(c, n)) + " for " + std::to_string(n) + " parameters");
  switch (c) {
    case PayloadCodec::None:
      std::memcpy(out.data(), b.data(), 4 * n);
      break;
    case PayloadCodec::Fp16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, b.data() + 2 * i, 2);
        out[i] = half_to_float(h);
      }
      break;
    case PayloadCodec::Int8: {
      const std::size_t blocks = (n + kInt8Block - 1) / kInt8Block;
      const auto* q = reinterpret_cast<const std::int8_t*>(b.data() + 4 * blocks);
      for (std::size_t k = 0; k < blocks; ++k) {
        float scale;
        std::memcpy(&scale, b.data() + 4 * k, 4);
        const std::size_t lo = k * kInt8Block, hi = std::min(n, lo + kInt8Block);
        for (std::size_t i = lo; i < hi; ++i) out[i] = scale * static_cast<float>(q[i]);
      }
      break;
    }
    case PayloadCodec::Int4: {
      const std::size_t blocks = (n + kInt4Block - 1) / kInt4Block;
      const std::uint8_t* q = b.data() + 4 * blocks;
      if (n % 2 == 1 && (q[n / 2] >> 4) != 0) throw DecodeError("int4 payload: padding nibble is not 0");
      for (std::size_t k = 0; k < blocks; ++k) {
        float scale;
        std::memcpy(&scale, b.data() + 4 * k, 4);
        if (!(scale >= 0) || !(scale <= kMaxInt4Scale))  // NaN, Inf and scales whose 7 x overflow
          throw DecodeError("int4 payload: block " + std::to_string(k) + " has scale " + std::to_string(scale));
        const std::size_t lo = k * kInt4Block, hi = std::min(n, lo + kInt4Block);
        for (std::size_t i = lo; i < hi; ++i) {
          const unsigned nib = i % 2 == 0 ? q[i / 2] & 0x0Fu : q[i / 2] >> 4;
          if (nib == 8) throw DecodeError("int4 payload: level -8 at value " + std::to_string(i) + " (levels are -7..7)");
          const int level = nib < 8 ? static_cast<int>(nib) : static_cast<int>(nib) - 16;
          out[i] = scale * static_cast<float>(level);
        }
      }
      break;
    }
    case PayloadCodec::TopK:
    case PayloadCodec::Auto:
      RUMOR_CHECK(false, "decode_dense: not a stateless codec");
  }
}

}  // namespace rumor
