#pragma once
// Subnormal floats flushed to zero while the native trainer computes (core/trainer.cpp).
//
// Training drives some values towards zero (Adam's moments of parameters whose gradients
// vanish, the weights' products in the backward pass), and floats below 1.2e-38 are
// subnormal: x86 handles each through a microcode assist about a hundred times slower than a
// normal operation. Left on, the quickstart's MLP step went from 0.73 ms to 1.5-1.75 ms between
// its first 700 steps and its 2,000th on this machine (rumor-sim --calibrate, which timed steps
// 20-1,400 at 1.10 ms against 0.75 ms for steps 10-670, and so put every simulated testbed run
// 25-50% behind the real one: docs/testbed.md). With FTZ and DAZ set the step stays at
// 0.71-0.75 ms. A subnormal is below any learning rate's effect on a weight, so training does
// not change otherwise (tests/core/test_trainer.cpp).
//
// The mode is the calling thread's (MXCSR on x86, FPCR on AArch64): FlushDenormals sets it for
// its scope and restores what was there, so the thread that calls into the trainer (a Python
// script's, say) keeps its own mode for its own code.
#include <cstdint>
#if defined(__x86_64__) || defined(_M_X64) || defined(__SSE2__)
#include <xmmintrin.h>
#define RUMOR_FPMODE_SSE 1
#endif

namespace rumor {

class FlushDenormals {
 public:
  FlushDenormals() {
#if defined(RUMOR_FPMODE_SSE)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | kFtzDaz);
#elif defined(__aarch64__)
    std::uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    saved_ = fpcr;
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | kFz));
#endif
  }
  ~FlushDenormals() {
#if defined(RUMOR_FPMODE_SSE)
    _mm_setcsr(static_cast<unsigned>(saved_));
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(saved_));
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

  // Whether the calling thread flushes subnormals now (for tests).
  static bool active() {
#if defined(RUMOR_FPMODE_SSE)
    return (_mm_getcsr() & kFtzDaz) == kFtzDaz;
#elif defined(__aarch64__)
    std::uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    return (fpcr & kFz) != 0;
#else
    return false;
#endif
  }

 private:
  static constexpr unsigned kFtzDaz = 0x8040;                  // MXCSR FTZ (bit 15) | DAZ (bit 6)
  static constexpr std::uint64_t kFz = std::uint64_t{1} << 24;  // FPCR FZ
  std::uint64_t saved_ = 0;
};

}  // namespace rumor
