// hash64: the 64-bit hash of the frame checksum and of payloads, XXH3-64 (XXH3_64bits, from
// libxxhash; docs/wire.md, protocol version 3). Pure code; it lives in core/ so that the
// protocol can hash a snapshot while it copies it (copy_and_hash), which saves the transport a
// separate pass over a large payload. net/frame.hpp re-exports it as net::FrameHasher /
// net::hash64.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

namespace rumor {

// Streaming XXH3-64: feeding the same bytes in any chunking gives XXH3_64bits_withSeed(all
// bytes, seed). Not a MAC: it catches corruption and bugs, not attackers.
class Hasher64 {
 public:
  explicit Hasher64(std::uint64_t seed = 0) { reset(seed); }
  void reset(std::uint64_t seed = 0);
  void update(std::span<const std::uint8_t> bytes);
  std::uint64_t digest() const;

 private:
  // XXH3_state_t, kept opaque here so that only core/hash.cpp includes xxhash.h (compiled
  // inline there, with this build's vector instructions); hash.cpp checks size and alignment.
  alignas(64) std::byte state_[640];
};

std::uint64_t hash64(std::span<const std::uint8_t> bytes, std::uint64_t seed = 0);

// Copies src to dst (src.size() bytes, not overlapping) and returns hash64(src, 0), in one
// pass over memory: chunk by chunk, each chunk hashed while it is in cache.
std::uint64_t copy_and_hash(std::span<const std::uint8_t> src, std::uint8_t* dst);

}  // namespace rumor
