// hash64 (see hash.hpp, docs/wire.md). Words are loaded with memcpy and byte-swapped on
// big-endian hosts, so the digest is the same on every host.
#include "core/hash.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace rumor {

namespace {

// Four independent lanes each absorb one 8-byte word per 32-byte stripe with a
// multiply-add-rotate-multiply step; the lanes do not depend on each other, so the CPU overlaps
// the four multiplies and the loop runs at memory bandwidth. The tail (< 32 bytes) is folded in
// word by word, and a final xor-shift-multiply avalanche spreads every input bit over the digest.
// All multipliers are odd (invertible mod 2^64), so no step loses information.
constexpr std::uint64_t kM1 = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio
constexpr std::uint64_t kM2 = 0xD6E8FEB86659FD93ull;
constexpr std::uint64_t kM3 = 0xBF58476D1CE4E5B9ull;
constexpr std::uint64_t kM4 = 0x94D049BB133111EBull;
constexpr std::uint64_t kM5 = 0xFF51AFD7ED558CCDull;

inline std::uint64_t load64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}
inline std::uint32_t load32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}
inline std::uint64_t absorb(std::uint64_t lane, std::uint64_t word) {
  return std::rotl(lane + word * kM2, 29) * kM1;
}
inline std::uint64_t avalanche(std::uint64_t h) {
  h ^= h >> 31;
  h *= kM3;
  h ^= h >> 29;
  h *= kM4;
  h ^= h >> 32;
  return h;
}

}  // namespace

void Hasher64::reset(std::uint64_t seed) {
  seed_ = seed;
  lanes_ = {seed + kM1 + kM2, seed + kM2, seed, seed - kM1};
  pending_len_ = 0;
  total_len_ = 0;
}

void Hasher64::consume_stripes(const std::uint8_t* p, std::size_t stripes) {
  std::uint64_t a = lanes_[0], b = lanes_[1], c = lanes_[2], d = lanes_[3];
  for (std::size_t i = 0; i < stripes; ++i, p += 32) {
    a = absorb(a, load64(p));
    b = absorb(b, load64(p + 8));
    c = absorb(c, load64(p + 16));
    d = absorb(d, load64(p + 24));
  }
  lanes_ = {a, b, c, d};
}

void Hasher64::update(std::span<const std::uint8_t> bytes) {
  const std::uint8_t* p = bytes.data();
  std::size_t n = bytes.size();
  if (n == 0) return;  // (and an empty span may carry a null pointer, which memcpy must not see)
  total_len_ += n;
  if (pending_len_ > 0) {
    const std::size_t take = std::min(n, pending_.size() - pending_len_);
    std::memcpy(pending_.data() + pending_len_, p, take);
    pending_len_ += take;
    p += take;
    n -= take;
    if (pending_len_ < pending_.size()) return;
    consume_stripes(pending_.data(), 1);
    pending_len_ = 0;
  }
  const std::size_t stripes = n / 32;
  consume_stripes(p, stripes);
  p += stripes * 32;
  n -= stripes * 32;
  if (n > 0) {
    std::memcpy(pending_.data(), p, n);
    pending_len_ = n;
  }
}

std::uint64_t Hasher64::digest() const {
  std::uint64_t h;
  if (total_len_ >= 32) {
    h = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) +
        std::rotl(lanes_[3], 18);
    for (std::uint64_t lane : lanes_) h = (h ^ absorb(0, lane)) * kM1 + kM5;
  } else {
    h = seed_ + kM5;
  }
  h += total_len_;
  const std::uint8_t* p = pending_.data();
  std::size_t n = pending_len_;
  for (; n >= 8; n -= 8, p += 8) h = std::rotl(h ^ absorb(0, load64(p)), 27) * kM1 + kM4;
  if (n >= 4) {
    h = std::rotl(h ^ (std::uint64_t{load32(p)} * kM1), 23) * kM2 + kM3;
    n -= 4;
    p += 4;
  }
  for (; n > 0; --n, ++p) h = std::rotl(h ^ (std::uint64_t{*p} * kM5), 11) * kM1;
  return avalanche(h);
}

std::uint64_t hash64(std::span<const std::uint8_t> bytes, std::uint64_t seed) {
  Hasher64 h(seed);
  h.update(bytes);
  return h.digest();
}

std::uint64_t copy_and_hash(std::span<const std::uint8_t> src, std::uint8_t* dst) {
  // 32 KiB: the chunk just written is still in L1/L2 when it is hashed; a multiple of the
  // 32-byte stripe, so update() never buffers a partial stripe in between.
  constexpr std::size_t kChunk = 32u << 10;
  Hasher64 h;
  for (std::size_t off = 0, n = src.size(); off < n; off += kChunk) {
    const std::size_t len = std::min(kChunk, n - off);
    std::memcpy(dst + off, src.data() + off, len);
    h.update({dst + off, len});
  }
  return h.digest();
}

}  // namespace rumor
