// hash64 = XXH3-64 (see hash.hpp, docs/wire.md). xxhash.h is compiled inline here
// (XXH_INLINE_ALL) rather than called in libxxhash.so: the shared library is built for the
// baseline x86-64 (SSE2), inline code gets this build's vector unit (-march=native: AVX2 on
// the development VM), about twice as fast. The digest is the same either way, on every host.
#include "core/hash.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace rumor {

namespace {
XXH3_state_t* state(std::byte* s) { return std::launder(reinterpret_cast<XXH3_state_t*>(s)); }
const XXH3_state_t* state(const std::byte* s) { return std::launder(reinterpret_cast<const XXH3_state_t*>(s)); }
}  // namespace

void Hasher64::reset(std::uint64_t seed) {
  static_assert(sizeof(XXH3_state_t) <= sizeof(state_) && alignof(XXH3_state_t) <= 64,
                "Hasher64::state_ must hold an XXH3_state_t");
  XXH3_state_t* s = new (state_) XXH3_state_t;
  XXH3_INITSTATE(s);
  XXH3_64bits_reset_withSeed(s, seed);
}

void Hasher64::update(std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) return;  // (an empty span may carry a null pointer)
  XXH3_64bits_update(state(state_), bytes.data(), bytes.size());
}

std::uint64_t Hasher64::digest() const { return XXH3_64bits_digest(state(state_)); }

std::uint64_t hash64(std::span<const std::uint8_t> bytes, std::uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.empty() ? nullptr : bytes.data(), bytes.size(), seed);
}

std::uint64_t copy_and_hash(std::span<const std::uint8_t> src, std::uint8_t* dst) {
  // 32 KiB: the chunk just written is still in L1/L2 when it is hashed. (Hashing the source
  // chunk, then copying it out with non-temporal stores, measured slower on the development
  // VM: see bench/README.md.)
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
