// Heap blocks of 256 bytes or more are aligned to 64 bytes in every program that links the
// simulator, so that a run's arithmetic does not depend on where its buffers happen to land.
//
// Why: Eigen's vectorised kernels (and auto-vectorised loops) handle the unaligned head of an
// array apart from its aligned body, so the grouping of the terms of a sum, and hence its
// rounding, depends on the array's address modulo 32. glibc's malloc aligns to 16 only, and
// where a block lands depends on everything allocated before it: an extra `--set`, a longer
// `--out` path or a second simulation in the same process shifted results in the last bits,
// and through training and chaos every later number. With every float buffer on a 64-byte
// boundary the same scenario and seed give the same bytes, whatever ran before.
// Small blocks (strings, map nodes) keep malloc's own alignment: nothing vectorised reads
// them, and aligning them would cost memory.
#include <cstdint>
#include <cstdlib>
#include <new>

namespace {
constexpr std::size_t kAlignFrom = 256;
constexpr std::size_t kAlign = 64;

#if defined(__SANITIZE_ADDRESS__)
#define RUMOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang
#define RUMOR_ASAN 1
#endif
#endif

#if defined(RUMOR_ASAN)
// Under AddressSanitizer the bytes before a block are its redzone: aligned_alloc, as ASan
// intercepts it (the same alignment, so the same arithmetic).
void* allocate(std::size_t n) {
  if (n < kAlignFrom) return std::malloc(n ? n : 1);
  return std::aligned_alloc(kAlign, (n + kAlign - 1) / kAlign * kAlign);
}
void release(void* p) { std::free(p); }
#else
// glibc's aligned_alloc takes no fast path (no thread cache): on every message a large
// simulation sent it spent a tenth of its time splitting and consolidating chunks. A large
// block is instead taken from malloc 64 bytes longer and handed out from its first 64-byte
// boundary past 8 bytes in; the word before that boundary says how far in it is, with the top
// bit set. A small block is malloc's own, and the word before it is malloc's chunk size
// (glibc keeps it there; sizes never reach 2^63), so delete tells the two apart.
constexpr std::uint64_t kOurs = std::uint64_t{1} << 63;

void* allocate(std::size_t n) {
  if (n < kAlignFrom) return std::malloc(n ? n : 1);
  if (n > SIZE_MAX - 2 * kAlign) return nullptr;
  auto* raw = static_cast<unsigned char*>(std::malloc(n + kAlign));
  if (!raw) return nullptr;
  const std::uintptr_t at = (reinterpret_cast<std::uintptr_t>(raw) + kAlign) & ~std::uintptr_t{kAlign - 1};
  auto* p = reinterpret_cast<unsigned char*>(at);
  const std::uint64_t tag = static_cast<std::uint64_t>(p - raw) | kOurs;  // 16 to 64 in: malloc aligns to 16
  __builtin_memcpy(p - sizeof tag, &tag, sizeof tag);
  return p;
}
void release(void* ptr) {
  if (!ptr) return;
  auto* p = static_cast<unsigned char*>(ptr);
  std::uint64_t tag = 0;
  __builtin_memcpy(&tag, p - sizeof tag, sizeof tag);
  if (tag & kOurs) std::free(p - (tag & ~kOurs));
  else std::free(p);
}
#endif
}  // namespace

namespace rumor::sim {
// Referenced by the simulator so that this file is always linked with it.
bool aligned_heap() { return true; }
}  // namespace rumor::sim

void* operator new(std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
