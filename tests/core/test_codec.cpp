// Codecs: round trips, error bounds, sizes, and that mixing decoded values conserves the sum.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/codec.hpp"
#include "core/mix.hpp"
#include "core/protocol_messages.hpp"
#include "core/rng.hpp"
#include "core/serial.hpp"

using namespace rumor;

namespace {
std::vector<float> sample(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.normal() * scale);
  return v;
}
}  // namespace

TEST_CASE("codec: none is exact, fp16 and int8 stay within their stated error bounds") {
  const auto x = sample(10000, 1, 0.1);
  std::vector<float> y(x.size());
  decode_dense(PayloadCodec::None, encode_dense(PayloadCodec::None, x), y);
  CHECK(x == y);
  decode_dense(PayloadCodec::Fp16, encode_dense(PayloadCodec::Fp16, x), y);
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK(std::abs(y[i] - x[i]) <= std::max(std::abs(x[i]) * 0x1.0p-11f, 0x1.0p-25f));
  const Bytes q = encode_dense(PayloadCodec::Int8, x);
  decode_dense(PayloadCodec::Int8, q, y);
  for (std::size_t b = 0; b * kInt8Block < x.size(); ++b) {
    float mx = 0;
    const std::size_t lo = b * kInt8Block, hi = std::min(x.size(), lo + kInt8Block);
    for (std::size_t i = lo; i < hi; ++i) mx = std::max(mx, std::abs(x[i]));
    for (std::size_t i = lo; i < hi; ++i) CHECK(std::abs(y[i] - x[i]) <= mx / 127.0f / 2.0f * 1.0001f);
  }
}

TEST_CASE("codec: fp16 halves and int8 quarters the payload, plus one scale per 256 values") {
  const std::size_t n = 235146;
  CHECK(encode_dense(PayloadCodec::None, sample(n, 2)).size() == 4 * n);
  CHECK(encode_dense(PayloadCodec::Fp16, sample(n, 2)).size() == 2 * n);
  CHECK(encode_dense(PayloadCodec::Int8, sample(n, 2)).size() == n + 4 * ((n + 255) / 256));
}

TEST_CASE("codec: fp16 edge cases: zero, subnormals, rounding to even, clamping, specials") {
  CHECK(half_to_float(float_to_half(0.0f)) == 0.0f);
  CHECK(std::signbit(half_to_float(float_to_half(-0.0f))));
  CHECK(half_to_float(float_to_half(1.0f)) == 1.0f);
  CHECK(half_to_float(float_to_half(65504.0f)) == 65504.0f);
  CHECK(half_to_float(float_to_half(1e9f)) == 65504.0f);  // clamped, not Inf
  CHECK(half_to_float(float_to_half(0x1.0p-24f)) == 0x1.0p-24f);  // smallest subnormal
  CHECK(half_to_float(float_to_half(0x1.8p-24f)) == 0x1.0p-23f);  // tie rounds to even
  CHECK(half_to_float(float_to_half(1.0f + 0x1.0p-11f)) == 1.0f);  // tie to even (down)
  CHECK(half_to_float(float_to_half(1.0f + 0x1.8p-11f)) == 1.0f + 0x1.0p-10f);
  CHECK(std::isnan(half_to_float(float_to_half(NAN))));
  CHECK(std::isinf(half_to_float(float_to_half(INFINITY))));
  // Every half value round-trips exactly.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    CHECK(float_to_half(f) == h);
  }
}

TEST_CASE("codec: a wrong payload size is a decode error, not a crash") {
  std::vector<float> y(100);
  CHECK_THROWS_AS(decode_dense(PayloadCodec::Int8, Bytes(50), y), DecodeError);
  CHECK_THROWS_AS(decode_dense(PayloadCodec::Fp16, Bytes(201), y), DecodeError);
  CHECK_THROWS_WITH_AS(parse_codec("zip"), doctest::Contains("int8"), std::invalid_argument);
}

TEST_CASE("codec: mixing the decoded snapshots conserves the sum and keeps what was not sent") {
  for (PayloadCodec c : {PayloadCodec::Fp16, PayloadCodec::Int8}) {
    auto x = sample(1000, 3), y = sample(1000, 4);
    const auto x0 = x, y0 = y;
    std::vector<float> xh(x.size()), yh(y.size());
    decode_dense(c, encode_dense(c, x), xh);
    decode_dense(c, encode_dense(c, y), yh);
    mix_into(x, yh, xh, 0.5);
    mix_into(y, xh, yh, 0.5);
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(x[i]) + y[i] - x0[i] - y0[i]));
    CHECK(worst < 1e-6);
    // Quantisation error stays local: x - x̂ is unchanged by the exchange.
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i] - (xh[i] + 0.5f * (yh[i] - xh[i])) == doctest::Approx(x0[i] - xh[i]).epsilon(1e-4));
  }
}

TEST_CASE("serial: a boolean field that is neither 0 nor 1 is a decode error, and 0/1 round-trip") {
  for (const bool extra : {false, true}) {
    const Message m = make_message(StateRequestMsg{3, 10, 20, extra, !extra});
    const StateRequestMsg r = decode_state_request(m);
    CHECK(r.extra == extra);
    CHECK(r.want_extra == !extra);
  }
  // The last two header bytes are the bools (Cereal binary, fields in order): any other byte
  // there is refused instead of being read into a bool (undefined behaviour; fuzz_gossip found it).
  Message m = make_message(StateRequestMsg{3, 10, 20, true, false});
  REQUIRE(m.header.size() >= 2);
  m.header[m.header.size() - 2] = 253;
  CHECK_THROWS_AS(decode_state_request(m), DecodeError);
  m.header[m.header.size() - 2] = 1;
  m.header.back() = 2;
  CHECK_THROWS_AS(decode_state_request(m), DecodeError);
}

TEST_CASE("codec: Q4 (int4's quantiser) stays within half a step per block, 0.5625 bytes per value") {
  for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65}, std::size_t{1001}}) {
    const auto x = sample(n, 11 + n, 0.3);
    const Bytes q = encode_dense(PayloadCodec::Int4, x);
    CHECK(q.size() == (n + 1) / 2 + 4 * ((n + kInt4Block - 1) / kInt4Block));
    CHECK(q.size() == encoded_size(PayloadCodec::Int4, n));
    std::vector<float> y(n);
    decode_dense(PayloadCodec::Int4, q, y);
    for (std::size_t lo = 0; lo < n; lo += kInt4Block) {
      const std::size_t hi = std::min(n, lo + kInt4Block);
      float mx = 0;
      for (std::size_t i = lo; i < hi; ++i) mx = std::max(mx, std::abs(x[i]));
      for (std::size_t i = lo; i < hi; ++i) CHECK(std::abs(y[i] - x[i]) <= mx / 7.0f / 2.0f * 1.0001f);
    }
  }
  // 235,146 parameters (the quickstart MLP): 0.5625 bytes per value against int8's 1.016.
  CHECK(encoded_size(PayloadCodec::Int4, 235146) == 117573 + 4 * 3675);
  // Zeros (a block with nothing to send) stay zeros, with scale 0.
  std::vector<float> z(100, 0.0f), back(100, 1.0f);
  decode_dense(PayloadCodec::Int4, encode_dense(PayloadCodec::Int4, z), back);
  CHECK(back == z);
}

TEST_CASE("codec: malformed Q4 payloads are decode errors (size, scale, level -8, padding)") {
  const auto x = sample(65, 5);
  const Bytes good = encode_dense(PayloadCodec::Int4, x);  // 2 blocks: 8 bytes of scales, 33 of levels
  std::vector<float> y(65);
  REQUIRE_NOTHROW(decode_dense(PayloadCodec::Int4, good, y));
  CHECK_THROWS_AS(decode_dense(PayloadCodec::Int4, Bytes(good.begin(), good.end() - 1), y), DecodeError);
  Bytes longer = good;
  longer.push_back(0);
  CHECK_THROWS_AS(decode_dense(PayloadCodec::Int4, longer, y), DecodeError);
  const auto with_scale = [&](float s) {
    Bytes b = good;
    std::memcpy(b.data() + 4, &s, 4);
    return b;
  };
  CHECK_THROWS_WITH_AS(decode_dense(PayloadCodec::Int4, with_scale(-1.0f), y), doctest::Contains("scale"), DecodeError);
  CHECK_THROWS_AS(decode_dense(PayloadCodec::Int4, with_scale(NAN), y), DecodeError);
  CHECK_THROWS_AS(decode_dense(PayloadCodec::Int4, with_scale(INFINITY), y), DecodeError);
  // Finite, but 7 x it overflows to Inf (fuzz_codecs found it).
  CHECK_THROWS_AS(decode_dense(PayloadCodec::Int4, with_scale(3e38f), y), DecodeError);
  Bytes minus8 = good;
  minus8[8] = static_cast<std::uint8_t>((minus8[8] & 0xF0u) | 0x08u);  // value 0's level: -8
  CHECK_THROWS_WITH_AS(decode_dense(PayloadCodec::Int4, minus8, y), doctest::Contains("-8"), DecodeError);
  Bytes pad = good;
  pad.back() = static_cast<std::uint8_t>(pad.back() | 0x10u);  // value 65's nibble: padding, must be 0
  CHECK_THROWS_WITH_AS(decode_dense(PayloadCodec::Int4, pad, y), doctest::Contains("padding"), DecodeError);
  CHECK(parse_codec("int4") == PayloadCodec::Int4);
  CHECK(std::string(codec_name(PayloadCodec::Int4)) == "int4");
}

TEST_CASE("codec: int4's error feedback: Q4 of x - ref reaches far below the 4-bit step, absolute Q4 stalls") {
  // Two models 0.01 apart around values of size 1: absolute 4 bits cannot tell them apart (the
  // step is max|x| / 7, about 0.4), so mixing the decoded values leaves them 0.01 apart; with
  // references (CHOCO-SGD), each round sends the residual and the distance keeps shrinking.
  const std::size_t n = 256;
  auto x = sample(n, 21), y = x;
  const auto noise = sample(n, 22, 0.01);
  for (std::size_t i = 0; i < n; ++i) y[i] += noise[i];
  const auto distance = [&](const std::vector<float>& a, const std::vector<float>& b) { return relative_distance(a, b); };
  // Absolute Q4: x += 1/2 (ŷ - x̂), y += 1/2 (x̂ - ŷ).
  auto ax = x, ay = y;
  std::vector<float> xh(n), yh(n);
  for (int round = 0; round < 50; ++round) {
    decode_dense(PayloadCodec::Int4, encode_dense(PayloadCodec::Int4, ax), xh);
    decode_dense(PayloadCodec::Int4, encode_dense(PayloadCodec::Int4, ay), yh);
    mix_into(ax, yh, xh, 0.5);
    mix_into(ay, xh, yh, 0.5);
  }
  // With references.
  std::vector<float> rx(n, 0.0f), ry(n, 0.0f), r(n), d(n);
  // First round absolute int8 (the references' fallback), then Q4 of the residual.
  decode_dense(PayloadCodec::Int8, encode_dense(PayloadCodec::Int8, x), rx);
  decode_dense(PayloadCodec::Int8, encode_dense(PayloadCodec::Int8, y), ry);
  double sum0 = 0, sum1 = 0;
  for (std::size_t i = 0; i < n; ++i) sum0 += double(x[i]) + y[i];
  {
    const auto xs = rx, ys = ry;
    mix_into(x, ys, xs, 0.5);
    mix_into(y, xs, ys, 0.5);
  }
  for (int round = 0; round < 50; ++round) {
    for (std::size_t i = 0; i < n; ++i) r[i] = x[i] - rx[i];
    decode_dense(PayloadCodec::Int4, encode_dense(PayloadCodec::Int4, r), d);
    for (std::size_t i = 0; i < n; ++i) rx[i] = rx[i] + d[i];
    for (std::size_t i = 0; i < n; ++i) r[i] = y[i] - ry[i];
    decode_dense(PayloadCodec::Int4, encode_dense(PayloadCodec::Int4, r), d);
    for (std::size_t i = 0; i < n; ++i) ry[i] = ry[i] + d[i];
    const auto xs = rx, ys = ry;
    mix_into(x, ys, xs, 0.5);
    mix_into(y, xs, ys, 0.5);
  }
  for (std::size_t i = 0; i < n; ++i) sum1 += double(x[i]) + y[i];
  INFO("absolute Q4: " << distance(ax, ay) << ", with references: " << distance(x, y));
  CHECK(distance(ax, ay) > 1e-3);  // stalled near where it started (0.01 / |x|)
  CHECK(distance(x, y) < 1e-6);
  CHECK(std::abs(sum1 - sum0) < 1e-3);
}

TEST_CASE("exchange header: fragments and int4 fields round-trip, and a fragment out of range is a decode error") {
  ExchangeMsg h;
  h.param_count = 10;
  h.fragments = 3;
  h.fragment = 2;
  h.ref_hash = 0x1234567890ABCDEFull;
  h.absolute = true;
  const ExchangeMsg r = decode_exchange(make_message(MsgType::ExchangeRequest, h, nullptr));
  CHECK(r.fragments == 3);
  CHECK(r.fragment == 2);
  CHECK(r.ref_hash == h.ref_hash);
  CHECK(r.absolute);
  // Near-equal contiguous ranges that cover the model: 0..3, 3..6, 6..10.
  CHECK(r.range_lo() == 6);
  CHECK(r.range_len() == 4);
  for (auto [frag, frags] : {std::pair{3u, 3u}, std::pair{0u, 0u}, std::pair{0u, kMaxFragments + 1}}) {
    h.fragment = frag;
    h.fragments = frags;
    CHECK_THROWS_AS(decode_exchange(make_message(MsgType::ExchangeRequest, h, nullptr)), DecodeError);
  }
  h.fragment = 0;
  h.fragments = 1;
  h.codec = static_cast<PayloadCodec>(5);
  CHECK_THROWS_WITH_AS(decode_exchange(make_message(MsgType::ExchangeRequest, h, nullptr)), doctest::Contains("codec"), DecodeError);
}
