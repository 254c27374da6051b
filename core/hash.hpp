// hash64: the streaming 64-bit hash of the frame checksum (docs/wire.md gives the algorithm).
// Pure code; it lives in core/ so that the protocol can hash a snapshot while it copies it
// (copy_and_hash), which saves the transport a separate pass over a large payload.
// net/frame.hpp re-exports it as net::FrameHasher / net::hash64.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace rumor {

// Our own 4-lane multiply-rotate design in the style of xxHash64 (not compatible with it).
// Feeding the same bytes in any chunking gives the same digest. Not a MAC.
class Hasher64 {
 public:
  explicit Hasher64(std::uint64_t seed = 0) { reset(seed); }
  void reset(std::uint64_t seed = 0);
  void update(std::span<const std::uint8_t> bytes);
  std::uint64_t digest() const;

 private:
  void consume_stripes(const std::uint8_t* p, std::size_t stripes);
  std::array<std::uint64_t, 4> lanes_{};
  std::array<std::uint8_t, 32> pending_{};  // a partial 32-byte stripe
  std::size_t pending_len_ = 0;
  std::uint64_t total_len_ = 0;
  std::uint64_t seed_ = 0;
};

std::uint64_t hash64(std::span<const std::uint8_t> bytes, std::uint64_t seed = 0);

// Copies src to dst (src.size() bytes, not overlapping) and returns hash64(src, 0), in one
// pass: chunk by chunk, each chunk hashed while it is still in cache.
std::uint64_t copy_and_hash(std::span<const std::uint8_t> src, std::uint8_t* dst);

}  // namespace rumor
