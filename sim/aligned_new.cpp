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
#include <cstdlib>
#include <new>

namespace {
constexpr std::size_t kAlignFrom = 256;
constexpr std::size_t kAlign = 64;

void* allocate(std::size_t n) {
  if (n < kAlignFrom) return std::malloc(n ? n : 1);
  return std::aligned_alloc(kAlign, (n + kAlign - 1) / kAlign * kAlign);
}
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
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
