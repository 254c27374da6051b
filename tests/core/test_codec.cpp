// Codecs: round trips, error bounds, sizes, and that mixing decoded values conserves the sum.
#include <doctest/doctest.h>

#include <cmath>
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
