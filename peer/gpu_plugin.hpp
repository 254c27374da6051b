// --device cuda: the CUDA backend (gpu/) is a plugin, librumor_gpu.so, loaded on first use, so
// CPU peers never load the CUDA libraries (gpu/plugin.cpp). It is looked for at
// $RUMOR_GPU_LIB, then beside the executable's directory (build tree: ../gpu/; installed:
// ../lib/rumor/), then by the dynamic loader's search path.
#pragma once
#include <memory>
#include <string>

#include "core/backend.hpp"

namespace rumor::peer {

// Whether this build made the plugin (RUMOR_HAVE_CUDA).
bool cuda_built();
// CUDA devices the plugin's runtime sees; 0 with the reason in *why when it sees none, cannot
// be loaded, or this build has none.
int cuda_device_count(std::string* why = nullptr);
// A backend on device `index`. Throws gpu::NoDevice (gpu/cuda_backend.hpp) when there is no
// such device, std::invalid_argument when this build has no CUDA backend, std::runtime_error
// when the plugin cannot be loaded (naming where it looked) or the device fails.
std::shared_ptr<Backend> make_cuda_backend(int index);

}  // namespace rumor::peer
