// The CUDA backend of the model math (core/backend.hpp): cuBLAS sgemm for the products and
// small kernels (gpu/cuda_backend.cu) for everything else, all queued on one CUDA stream of
// one device. Built only where nvcc exists (RUMOR_HAVE_CUDA, CMake option RUMOR_CUDA); this
// header has no CUDA includes, so the daemon, the tests and the benchmark include it freely.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "core/backend.hpp"

namespace rumor::gpu {

// No usable device (no driver, no GPU, or the index is past the last one).
struct NoDevice : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// CUDA devices the runtime sees; 0 when it sees none or fails, with the runtime's reason in
// *why (when given).
int device_count(std::string* why = nullptr);

// A backend on device `index` with its own stream and cuBLAS handle. Throws NoDevice
// ("no CUDA device found ..." or "CUDA device N not found ...") before touching anything else.
std::shared_ptr<Backend> make_cuda_backend(int index);

}  // namespace rumor::gpu
