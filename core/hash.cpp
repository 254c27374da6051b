// hash64 = XXH3-64 (see hash.hpp, docs/wire.md). xxhash.h is compiled inline here
// (XXH_INLINE_ALL) rather than called in libxxhash.so: the shared library is built for the
// baseline x86-64 (SSE2), inline code gets this build's vector unit (-march=native: AVX2 on
// the development VM), about twice as fast. The digest is the same either way, on every host.
// copy_and_hash copies with non-temporal stores where the CPU has them (SSE2, AVX).
#include "core/hash.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

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

namespace {

// Copies len bytes from src to dst. From a source that is in cache (it has just been hashed),
// with non-temporal stores where the CPU has them: the destination lines are written without
// being read first, so a copy moves 2 bytes of memory traffic per byte instead of 3. (An
// exchange's snapshot goes out in 4 MiB chunks, each written by the transport soon after it
// is copied; copying with ordinary stores, which would leave part of it in cache for that,
// did no better in bench_exchange_throughput on the 2-core VM: bench/README.md.)
// The caller issues the store fence.
void copy_streaming(std::uint8_t* dst, const std::uint8_t* src, std::size_t len) {
#if defined(__AVX__) || defined(__SSE2__)
#if defined(__AVX__)
  using V = __m256i;
#else
  using V = __m128i;
#endif
  constexpr std::size_t kV = sizeof(V);
  const std::size_t head = std::min(len, (kV - reinterpret_cast<std::uintptr_t>(dst) % kV) % kV);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  len -= head;
  const std::size_t body = len / kV * kV;
  for (std::size_t i = 0; i < body; i += kV) {
#if defined(__AVX__)
    _mm256_stream_si256(reinterpret_cast<V*>(dst + i), _mm256_loadu_si256(reinterpret_cast<const V*>(src + i)));
#else
    _mm_stream_si128(reinterpret_cast<V*>(dst + i), _mm_loadu_si128(reinterpret_cast<const V*>(src + i)));
#endif
  }
  std::memcpy(dst + body, src + body, len - body);
#else
  std::memcpy(dst, src, len);
#endif
}

}  // namespace

std::uint64_t copy_and_hash(std::span<const std::uint8_t> src, std::uint8_t* dst) {
  // 16 KiB at a time: hashing a source chunk brings it into L1, from where it is copied out.
  // (Copying first and hashing the copy in cache costs about 2.3 memcpys of the whole buffer on
  // the development VM, this order about 1.5: bench/README.md.)
  constexpr std::size_t kChunk = 16u << 10;
  Hasher64 h;
  for (std::size_t off = 0, n = src.size(); off < n; off += kChunk) {
    const std::size_t len = std::min(kChunk, n - off);
    h.update(src.subspan(off, len));
    copy_streaming(dst + off, src.data() + off, len);
  }
#if defined(__SSE2__)
  _mm_sfence();  // the streamed stores are visible before anyone is handed the buffer
#endif
  return h.digest();
}

}  // namespace rumor
