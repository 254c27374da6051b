// The C entry points of librumor_gpu.so, the CUDA backend as a plugin: rumor-peer loads it
// with dlopen only when --device cuda asks for it (peer/gpu_plugin.cpp), so a CPU peer never
// maps libcudart and libcublas (0.45 s of CPU at every start on the development machine, most
// of a 64-process swarm's start-up). Plain C types across the boundary; exceptions stay inside.
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "gpu/cuda_backend.hpp"

namespace {
void copy_out(const std::string& s, char* buf, std::size_t size) {
  if (!buf || size == 0) return;
  const std::size_t n = std::min(s.size(), size - 1);
  std::memcpy(buf, s.data(), n);
  buf[n] = '\0';
}
}  // namespace

extern "C" {

// Bumped when an entry point changes: the loader refuses a plugin of another version.
__attribute__((visibility("default"))) int rumor_gpu_plugin_version() { return 1; }

__attribute__((visibility("default"))) int rumor_gpu_device_count(char* why, std::size_t why_size) {
  std::string w;
  const int n = rumor::gpu::device_count(&w);
  copy_out(w, why, why_size);
  return n;
}

// 0: *out holds a new std::shared_ptr<rumor::Backend>* (the caller owns it); 1: no such device
// (rumor::gpu::NoDevice); 2: any other failure. The message goes to err either way.
__attribute__((visibility("default"))) int rumor_gpu_make_backend(int index, void** out, char* err,
                                                                  std::size_t err_size) {
  try {
    *out = new std::shared_ptr<rumor::Backend>(rumor::gpu::make_cuda_backend(index));
    return 0;
  } catch (const rumor::gpu::NoDevice& e) {
    copy_out(e.what(), err, err_size);
    return 1;
  } catch (const std::exception& e) {
    copy_out(e.what(), err, err_size);
    return 2;
  }
}

}  // extern "C"
