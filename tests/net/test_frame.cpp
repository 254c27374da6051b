// Frame codec tests: round trips, every split point, every malformed case the decoder must
// refuse (with a reason, and before allocating), the checksum's streaming property, and a
// small mutation fuzz. Pure: no sockets.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <random>
#include <set>

#include "net/frame.hpp"

using namespace rumor;
using namespace rumor::net;

namespace {

Message make_message(MsgType type, std::size_t header_bytes, std::size_t payload_bytes,
                     std::uint32_t seed = 1) {
  std::mt19937 rng(seed);
  Message m;
  m.type = type;
  m.header.resize(header_bytes);
  for (auto& b : m.header) b = static_cast<std::uint8_t>(rng());
  if (payload_bytes > 0) {
    auto p = std::make_shared<Bytes>(payload_bytes);
    for (auto& b : *p) b = static_cast<std::uint8_t>(rng());
    m.payload = p;
  }
  return m;
}

bool same(const Message& a, const Message& b) {
  if (a.type != b.type || a.header != b.header || a.payload_size() != b.payload_size()) return false;
  return a.payload_size() == 0 || *a.payload == *b.payload;
}

// Decodes a whole buffer in one feed.
FrameDecoder::Result decode_all(std::span<const std::uint8_t> bytes, std::vector<Message>& out,
                                FrameLimits limits = {}) {
  FrameDecoder d(limits);
  return d.feed(bytes, out);
}

// A frame whose fixed header is `h` (checksum recomputed unless told not to) and whose body is
// `body`.
Bytes craft(FrameHeader h, const Bytes& body = {}, bool fix_checksum = true) {
  if (fix_checksum) {
    const std::span<const std::uint8_t> all(body);
    const auto hdr = all.first(std::min<std::size_t>(h.header_len, body.size()));
    const auto pay = all.subspan(hdr.size());
    h.checksum = frame_checksum(h, hdr, pay);
  }
  const auto fixed = write_frame_header(h);
  Bytes out(fixed.size() + body.size());  // (not insert(): GCC 12 warns falsely on it)
  std::memcpy(out.data(), fixed.data(), fixed.size());
  if (!body.empty()) std::memcpy(out.data() + fixed.size(), body.data(), body.size());
  return out;
}

FrameDecoder::Result decode_bad(const Bytes& frame, FrameLimits limits = {}) {
  std::vector<Message> out;
  auto r = decode_all(frame, out, limits);
  CHECK(out.empty());
  return r;
}

}  // namespace

TEST_CASE("frame: fixed header layout is little-endian with the documented offsets") {
  FrameHeader h;
  h.type = 4;
  h.header_len = 0x01020304;
  h.flags = 0;
  h.payload_len = 0x1122334455667788ull;
  h.checksum = 0xA1A2A3A4A5A6A7A8ull;
  const auto b = write_frame_header(h);
  CHECK(b[0] == 'R');
  CHECK(b[1] == 'M');
  CHECK(b[2] == 'R');
  CHECK(b[3] == '1');
  CHECK(b[4] == kProtocolVersion);
  CHECK(b[5] == 0);
  CHECK(b[6] == 4);
  CHECK(b[8] == 0x04);
  CHECK(b[11] == 0x01);
  CHECK(b[16] == 0x88);
  CHECK(b[23] == 0x11);
  CHECK(b[24] == 0xA8);
  CHECK(b[31] == 0xA1);
  const auto back = read_frame_header(b);
  CHECK(back.magic == kFrameMagic);
  CHECK(back.payload_len == h.payload_len);
  CHECK(back.checksum == h.checksum);
  CHECK(back.header_len == h.header_len);
}

TEST_CASE("frame: round trip with header and payload, and with neither") {
  for (const auto& m : {make_message(MsgType::ExchangeRequest, 40, 1000),
                        make_message(MsgType::Ping, 0, 0), make_message(MsgType::Ack, 7, 0),
                        make_message(MsgType::StateChunk, 0, 33)}) {
    const Bytes frame = encode_frame(m);
    CHECK(frame.size() == kFrameHeaderSize + m.header.size() + m.payload_size());
    std::vector<Message> out;
    const auto r = decode_all(frame, out);
    REQUIRE(r.good());
    REQUIRE(out.size() == 1);
    CHECK(same(out[0], m));
  }
}

TEST_CASE("frame: encode_frame_header matches the contiguous encoding (scatter-gather send)") {
  const auto m = make_message(MsgType::ExchangeReply, 12, 4096);
  const auto fixed = encode_frame_header(m);
  const Bytes frame = encode_frame(m);
  CHECK(std::equal(fixed.begin(), fixed.end(), frame.begin()));
}

TEST_CASE("frame: a frame split at every byte boundary decodes identically") {
  const auto m = make_message(MsgType::JoinReply, 20, 48);  // 100 bytes in all
  const Bytes frame = encode_frame(m);
  REQUIRE(frame.size() == 100);
  for (std::size_t cut = 0; cut <= frame.size(); ++cut) {
    FrameDecoder d;
    std::vector<Message> out;
    const std::span<const std::uint8_t> all(frame);
    const auto r1 = d.feed(all.first(cut), out);
    CHECK(r1.status == (cut == frame.size() ? FrameDecoder::Status::Good
                                            : FrameDecoder::Status::NeedMore));
    const auto r2 = d.feed(all.subspan(cut), out);
    CHECK_FALSE(r2.bad());
    REQUIRE(out.size() == 1);
    CHECK(same(out[0], m));
  }
  // One byte at a time.
  FrameDecoder d;
  std::vector<Message> out;
  for (std::size_t i = 0; i < frame.size(); ++i) {
    CHECK(d.in_frame() == (i > 0));
    CHECK(d.frame_bytes_received() == i);
    const auto r = d.feed(std::span<const std::uint8_t>(&frame[i], 1), out);
    CHECK(r.status == (i + 1 == frame.size() ? FrameDecoder::Status::Good
                                             : FrameDecoder::Status::NeedMore));
    if (i >= kFrameHeaderSize - 1 && i + 1 < frame.size()) CHECK(d.frame_bytes_expected() == 100);
  }
  REQUIRE(out.size() == 1);
  CHECK(same(out[0], m));
}

TEST_CASE("frame: two frames back to back split at every boundary") {
  const auto a = make_message(MsgType::ExchangeRequest, 10, 30, 1);
  const auto b = make_message(MsgType::ExchangeBusy, 5, 0, 2);
  Bytes both = encode_frame(a);
  const Bytes fb = encode_frame(b);
  both.insert(both.end(), fb.begin(), fb.end());
  for (std::size_t cut = 0; cut <= both.size(); ++cut) {
    FrameDecoder d;
    std::vector<Message> out;
    const std::span<const std::uint8_t> all(both);
    CHECK_FALSE(d.feed(all.first(cut), out).bad());
    const auto r = d.feed(all.subspan(cut), out);
    if (cut < both.size()) CHECK(r.good());  // (else the second feed was empty)
    REQUIRE(out.size() == 2);
    CHECK(same(out[0], a));
    CHECK(same(out[1], b));
  }
}

TEST_CASE("frame: prepare/commit zero-copy path hands out the payload's final buffer") {
  const auto m = make_message(MsgType::ExchangeReply, 8, 5000);
  const Bytes frame = encode_frame(m);
  FrameDecoder d;
  std::size_t pos = 0;
  std::uint8_t* payload_region = nullptr;
  FrameDecoder::Result r;
  while (pos < frame.size()) {
    auto dst = d.prepare();
    REQUIRE(!dst.empty());
    const std::size_t n = std::min<std::size_t>(dst.size(), std::min<std::size_t>(777, frame.size() - pos));
    std::memcpy(dst.data(), frame.data() + pos, n);
    if (pos >= kFrameHeaderSize + m.header.size() && payload_region == nullptr)
      payload_region = dst.data();
    pos += n;
    r = d.commit(n);
    REQUIRE_FALSE(r.bad());
  }
  REQUIRE(r.good());
  const Message got = d.take();
  CHECK(same(got, m));
  REQUIRE(got.payload);
  CHECK(got.payload->data() == payload_region);  // received in place, never copied
}

TEST_CASE("frame: a payload pool reuses the buffer of a dropped payload of the same size") {
  auto pool = PayloadPool::create(1 << 20);
  const auto m = make_message(MsgType::StateChunk, 4, 100000, 1);
  const Bytes frame = encode_frame(m);
  FrameDecoder d({}, pool);
  std::vector<Message> out;
  REQUIRE(d.feed(frame, out).good());
  const std::uint8_t* first = out[0].payload->data();
  CHECK(same(out[0], m));
  out.clear();  // the application drops it: back to the pool
  CHECK(pool->idle_bytes() == 100000);
  REQUIRE(d.feed(frame, out).good());
  CHECK(out[0].payload->data() == first);
  CHECK(same(out[0], m));
  CHECK(pool->reused() == 1);
  // A different size is freshly allocated; a pool never holds more than its limit idle.
  const auto big = make_message(MsgType::StateChunk, 4, 2 << 20, 2);
  REQUIRE(d.feed(encode_frame(big), out).good());
  CHECK(same(out[1], big));
  out.clear();
  CHECK(pool->idle_bytes() == 100000);
  // Payloads outlive their pool safely.
  REQUIRE(d.feed(frame, out).good());
  pool.reset();
  d = FrameDecoder();
  CHECK(same(out[0], m));
  out.clear();
}

TEST_CASE("frame: random bytes are refused with a reason") {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 2000; ++i) {
    Bytes junk(1 + rng() % 200);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    std::vector<Message> out;
    const auto r = decode_all(junk, out);
    CHECK(out.empty());
    if (junk.size() >= 4) {  // the magic is checked as soon as its 4 bytes are in
      CHECK(r.bad());
      CHECK(!r.reason.empty());
    }
  }
  const std::string http = "GET / HTTP/1.1\r\n\r\n";  // shorter than a fixed header
  const auto r = decode_bad(Bytes(http.begin(), http.end()));
  REQUIRE(r.bad());
  CHECK(r.reason.find("bad magic") != std::string::npos);
  CHECK(r.reason.find("not a Rumor peer") != std::string::npos);
}

TEST_CASE("frame: each malformed fixed header is Bad with its reason") {
  FrameHeader good;
  good.type = static_cast<std::uint16_t>(MsgType::Ping);

  SUBCASE("wrong magic") {
    FrameHeader h = good;
    h.magic = 0xDEADBEEF;
    const auto r = decode_bad(craft(h));
    REQUIRE(r.bad());
    CHECK(r.reason == "bad magic 0xdeadbeef (not a Rumor peer?)");
  }
  SUBCASE("wrong version") {
    FrameHeader h = good;
    h.version = kProtocolVersion + 1;
    const auto r = decode_bad(craft(h));
    REQUIRE(r.bad());
    CHECK(r.reason == "protocol version " + std::to_string(kProtocolVersion + 1) + ", we speak " + std::to_string(kProtocolVersion));
  }
  SUBCASE("unknown type 0 and kMaxMsgType + 1") {
    for (std::uint16_t t : {std::uint16_t{0}, std::uint16_t(kMaxMsgType + 1), std::uint16_t{0xFFFF}}) {
      FrameHeader h = good;
      h.type = t;
      const auto r = decode_bad(craft(h));
      REQUIRE(r.bad());
      CHECK(r.reason == "unknown message type " + std::to_string(t));
    }
  }
  SUBCASE("nonzero reserved flags") {
    FrameHeader h = good;
    h.flags = 1;
    const auto r = decode_bad(craft(h));
    REQUIRE(r.bad());
    CHECK(r.reason.find("reserved flags") != std::string::npos);
  }
  SUBCASE("header length beyond the limit") {
    FrameHeader h = good;
    h.header_len = 0xFFFFFFFFu;
    const auto r = decode_bad(craft(h, {}, false), FrameLimits{1024, 1 << 20});
    REQUIRE(r.bad());
    CHECK(r.reason == "header of 4294967295 bytes exceeds the limit of 1024");
  }
  SUBCASE("payload length beyond the limit is refused before allocating") {
    FrameHeader h = good;
    h.payload_len = 1ull << 62;
    FrameDecoder d;  // default limits (2 GiB)
    std::vector<Message> out;
    FrameDecoder::Result r;
    CHECK_NOTHROW(r = d.feed(craft(h, {}, false), out));
    REQUIRE(r.bad());
    CHECK(r.reason == "payload of 4611686018427387904 bytes exceeds the limit of 2147483648");
    h.payload_len = 1001;
    const auto r2 = decode_bad(craft(h, {}, false), FrameLimits{1024, 1000});
    REQUIRE(r2.bad());
    CHECK(r2.reason == "payload of 1001 bytes exceeds the limit of 1000");
  }
  SUBCASE("header-only limit of zero payload (the handshake limits)") {
    const auto m = make_message(MsgType::Hello, 10, 1);
    const auto r = decode_bad(encode_frame(m), FrameLimits{4096, 0});
    REQUIRE(r.bad());
    CHECK(r.reason == "payload of 1 bytes exceeds the limit of 0");
  }
}

TEST_CASE("frame: corruption anywhere is caught by the checksum") {
  const auto m = make_message(MsgType::ExchangeRequest, 16, 256);
  const Bytes frame = encode_frame(m);
  SUBCASE("corrupted checksum field") {
    Bytes f = frame;
    f[24] ^= 0x01;
    const auto r = decode_bad(f);
    REQUIRE(r.bad());
    CHECK(r.reason.find("checksum mismatch") != std::string::npos);
  }
  SUBCASE("payload byte flipped") {
    Bytes f = frame;
    f[f.size() - 100] ^= 0x40;
    const auto r = decode_bad(f);
    REQUIRE(r.bad());
    CHECK(r.reason.find("checksum mismatch") != std::string::npos);
  }
  SUBCASE("header byte flipped") {
    Bytes f = frame;
    f[kFrameHeaderSize + 3] ^= 0x80;
    const auto r = decode_bad(f);
    REQUIRE(r.bad());
    CHECK(r.reason.find("checksum mismatch") != std::string::npos);
  }
  SUBCASE("type changed to another valid type") {
    Bytes f = frame;
    f[6] = static_cast<std::uint8_t>(MsgType::ExchangeReply);
    const auto r = decode_bad(f);
    REQUIRE(r.bad());
    CHECK(r.reason.find("checksum mismatch") != std::string::npos);
  }
}

TEST_CASE("frame: after Bad the decoder stays Bad") {
  FrameHeader h;
  h.magic = 0;
  h.type = 1;
  FrameDecoder d;
  std::vector<Message> out;
  REQUIRE(d.feed(craft(h), out).bad());
  const std::string reason = d.reason();
  const Bytes good = encode_frame(make_message(MsgType::Ping, 4, 4));
  const auto r = d.feed(good, out);
  CHECK(r.bad());
  CHECK(r.reason == reason);
  CHECK(out.empty());
  CHECK(d.commit(0).bad());
  CHECK(d.bad());
}

TEST_CASE("frame: mutated valid frames never decode to a different message") {
  std::mt19937_64 rng(7);
  const auto m = make_message(MsgType::ExchangeReply, 30, 70);
  const Bytes frame = encode_frame(m);
  int bad = 0;
  for (int i = 0; i < 5000; ++i) {
    Bytes f = frame;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) f[rng() % f.size()] ^= static_cast<std::uint8_t>(1 + rng() % 255);
    std::vector<Message> out;
    FrameDecoder::Result r;
    REQUIRE_NOTHROW(r = decode_all(f, out, FrameLimits{1 << 16, 1 << 16}));
    if (r.bad()) ++bad;
    for (const auto& got : out) CHECK(same(got, m));
  }
  CHECK(bad > 4000);  // the rest only grew a length field and wait for more bytes
}

TEST_CASE("frame: hash is chunking-independent and sensitive") {
  std::mt19937_64 rng(3);
  Bytes data(1000);
  for (auto& b : data) b = static_cast<std::uint8_t>(rng());
  for (std::size_t len : {0u, 1u, 3u, 4u, 7u, 8u, 31u, 32u, 33u, 63u, 64u, 65u, 200u, 1000u}) {
    const std::span<const std::uint8_t> s(data.data(), len);
    const auto whole = hash64(s);
    for (std::size_t cut = 0; cut <= len; ++cut) {
      FrameHasher h;
      h.update(s.first(cut));
      h.update(s.subspan(cut));
      CHECK(h.digest() == whole);
    }
    // Bytes fed one at a time.
    FrameHasher h;
    for (std::size_t i = 0; i < len; ++i) h.update(s.subspan(i, 1));
    CHECK(h.digest() == whole);
  }
  // Different lengths of zeros, a flipped bit, a different seed: all different digests.
  const Bytes zeros(256, 0);
  std::set<std::uint64_t> seen;
  for (std::size_t len = 0; len <= 256; ++len) seen.insert(hash64(std::span(zeros.data(), len)));
  CHECK(seen.size() == 257);
  Bytes flipped = data;
  for (std::size_t bit = 0; bit < 64; ++bit) {
    flipped = data;
    flipped[bit * 13 % data.size()] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    CHECK(hash64(flipped) != hash64(data));
  }
  CHECK(hash64(data, 1) != hash64(data, 0));
}

TEST_CASE("frame: the hash is XXH3-64 (known answers from libxxhash.so, xxhsum -H3)") {
  // Computed with XXH3_64bits / XXH3_64bits_withSeed of the shared library, which is built
  // apart from the inline code core/hash.cpp compiles.
  CHECK(hash64({}) == 0x2d06800538d394c2ull);
  const std::string abc = "abc";
  CHECK(hash64({reinterpret_cast<const std::uint8_t*>(abc.data()), abc.size()}) == 0x78af5f94892f3950ull);
  Bytes b(1000);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 131 + 7);
  CHECK(hash64(b) == 0x571d5cbfef44331bull);
  CHECK(hash64(std::span(b.data(), 240)) == 0xb6cfaf343fab81e6ull);
  CHECK(hash64(b, 7) == 0x96b56672548fd140ull);
  FrameHasher h(7);
  for (std::size_t i = 0; i < b.size(); i += 77) h.update(std::span(b).subspan(i, std::min<std::size_t>(77, b.size() - i)));
  CHECK(h.digest() == 0x96b56672548fd140ull);
}

TEST_CASE("frame: hash throughput (informational)") {
  Bytes big(64u << 20);
  std::mt19937_64 rng(9);
  for (std::size_t i = 0; i < big.size(); i += 8) {
    const auto v = rng();
    std::memcpy(&big[i], &v, 8);
  }
  volatile std::uint64_t sink = hash64(big);  // warm up
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kReps = 4;
  for (int i = 0; i < kReps; ++i) sink = sink + hash64(big);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("hash64: " << (kReps * big.size() / s / 1e9) << " GB/s over 64 MiB");
  CHECK(s > 0);
}

TEST_CASE("frame: copy_and_hash copies and hashes like memcpy + hash64") {
  std::mt19937_64 rng(5);
  for (std::size_t len : {0u, 1u, 31u, 32u, 33u, 32768u, 32769u, 100001u}) {
    Bytes src(len);
    for (auto& b : src) b = static_cast<std::uint8_t>(rng());
    Bytes dst(len + 1, 0xAA);
    CHECK(copy_and_hash(src, dst.data()) == hash64(src));
    CHECK(std::equal(src.begin(), src.end(), dst.begin()));
    CHECK(dst[len] == 0xAA);  // nothing written past the end
    // Destinations at every alignment (the copy streams whole vectors between a head and a tail).
    for (std::size_t shift : {1u, 3u, 8u, 17u, 31u}) {
      Bytes d2(len + shift + 1, 0xAA);
      CHECK(copy_and_hash(src, d2.data() + shift) == hash64(src));
      CHECK(std::equal(src.begin(), src.end(), d2.begin() + static_cast<std::ptrdiff_t>(shift)));
      CHECK(d2[shift - 1] == 0xAA);
      CHECK(d2[len + shift] == 0xAA);
    }
  }
}

TEST_CASE("frame: the checksum covers the payload through its digest, supplied or computed") {
  Message m = make_message(MsgType::ExchangeRequest, 40, 100000);
  const auto computed = encode_frame_header(m);
  // The documented definition (docs/wire.md, version 3).
  FrameHeader h = read_frame_header(computed);
  const std::uint64_t d = hash64(*m.payload);
  std::array<std::uint8_t, 8> le{};
  for (int i = 0; i < 8; ++i) le[i] = static_cast<std::uint8_t>(d >> (8 * i));
  FrameHeader z = h;
  z.checksum = 0;
  FrameHasher fh;
  fh.update(write_frame_header(z));
  fh.update(m.header);
  fh.update(le);
  CHECK(h.checksum == fh.digest());
  // A producer's digest (Gossip computes it while copying its snapshot) gives the same frame.
  m.payload_digest = d;
  CHECK(encode_frame_header(m) == computed);
  // The receiver hashes the payload itself and hands the digest on.
  std::vector<Message> out;
  CHECK(decode_all(encode_frame(m), out).good());
  REQUIRE(out.size() == 1);
  CHECK(same(out[0], m));
  CHECK(out[0].payload_digest == d);
  // A digest that does not match the payload makes a frame the receiver refuses.
  m.payload_digest = d ^ 1;
  const auto r = decode_bad(encode_frame(m));
  CHECK(r.reason.find("checksum mismatch") == 0);
}

TEST_CASE("frame: the receiver checks the payload's float32 words as they land (payload_finite)") {
  // 1 MB of finite floats, so the payload lands in several prepare() steps; a NaN or Inf in
  // the last word, in the first, or cut in two by a read.
  const std::size_t n = 250'000;
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.5f + 1e-3f * static_cast<float>(i % 1000);
  const auto frame_of = [&](const std::vector<float>& x) {
    Message m = make_message(MsgType::ExchangePayload, 24, 0);
    m.payload = std::make_shared<Bytes>(reinterpret_cast<const std::uint8_t*>(x.data()),
                                        reinterpret_cast<const std::uint8_t*>(x.data() + x.size()));
    return encode_frame(m);
  };
  const auto finite_flag = [](const Bytes& frame, std::size_t read_size) {
    FrameDecoder d;
    std::vector<Message> out;
    for (std::size_t off = 0; off < frame.size(); off += read_size) {
      const auto r = d.feed(std::span(frame).subspan(off, std::min(read_size, frame.size() - off)), out);
      REQUIRE(!r.bad());
    }
    REQUIRE(out.size() == 1);
    CHECK(out[0].payload_digest == hash64(*out[0].payload));
    return out[0].payload_finite;
  };
  for (std::size_t read_size : {std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20}) {
    INFO("reads of " << read_size << " bytes");
    if (read_size == 7) v.resize(20'000);  // byte-ish reads: a smaller payload
    CHECK(finite_flag(frame_of(v), read_size) == std::optional<bool>(true));
    for (std::size_t at : {v.size() - 1, std::size_t{0}, v.size() / 2 + 1}) {
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        auto w = v;
        w[at] = bad;
        INFO("bad value at " << at);
        CHECK(finite_flag(frame_of(w), read_size) == std::optional<bool>(false));
      }
    }
    v.assign(n, 0.25f);
  }
  // A payload that is not whole float32 words: no verdict, the protocol decides.
  Message odd = make_message(MsgType::ExchangePayload, 8, 4 * 1000 + 3);
  std::vector<Message> out;
  REQUIRE(decode_all(encode_frame(odd), out).good());
  REQUIRE(out.size() == 1);
  CHECK(!out[0].payload_finite);
}

TEST_CASE("frame: a payload corrupted in its last chunk is refused whole, whatever the reads") {
  Message m = make_message(MsgType::ExchangePayload, 40, 3u << 20);
  Bytes f = encode_frame(m);
  f[f.size() - 3] ^= 0x10;  // in the last of many prepare() steps
  for (std::size_t read_size : {std::size_t{4096}, std::size_t{1} << 20, f.size()}) {
    FrameDecoder d;
    std::vector<Message> out;
    FrameDecoder::Result r;
    for (std::size_t off = 0; off < f.size() && !r.bad(); off += read_size)
      r = d.feed(std::span(f).subspan(off, std::min(read_size, f.size() - off)), out);
    CHECK(r.bad());
    CHECK(r.reason.find("checksum mismatch") == 0);
    CHECK(out.empty());  // nothing of it reaches the protocol
  }
}
