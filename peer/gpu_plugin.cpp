// Loading librumor_gpu.so (peer/gpu_plugin.hpp).
#include "peer/gpu_plugin.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "gpu/cuda_backend.hpp"

namespace rumor::peer {

namespace {

struct Plugin {
  int (*device_count)(char*, std::size_t) = nullptr;
  int (*make_backend)(int, void**, char*, std::size_t) = nullptr;
  std::string error;  // why it could not be loaded
};

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("RUMOR_GPU_LIB"); env && *env) out.push_back(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto dir = exe.parent_path();
    out.push_back((dir / ".." / "gpu" / "librumor_gpu.so").lexically_normal().string());
    out.push_back((dir / ".." / "lib" / "rumor" / "librumor_gpu.so").lexically_normal().string());
    out.push_back((dir / "librumor_gpu.so").string());
  }
  out.push_back("librumor_gpu.so");
  return out;
}

const Plugin& plugin() {
  static Plugin p;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    for (const auto& path : candidates()) {
      const bool bare = path.find('/') == std::string::npos;
      if (!bare && !std::filesystem::exists(path)) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* e = ::dlerror();
        tried += (tried.empty() ? "" : ", ") + path + " (" + (e ? e : "dlopen failed") + ")";
        continue;
      }
      auto version = reinterpret_cast<int (*)()>(::dlsym(h, "rumor_gpu_plugin_version"));
      p.device_count = reinterpret_cast<int (*)(char*, std::size_t)>(::dlsym(h, "rumor_gpu_device_count"));
      p.make_backend = reinterpret_cast<int (*)(int, void**, char*, std::size_t)>(::dlsym(h, "rumor_gpu_make_backend"));
      if (!version || version() != 1 || !p.device_count || !p.make_backend) {
        p.device_count = nullptr;
        p.make_backend = nullptr;
        tried += (tried.empty() ? "" : ", ") + path + " (not a Rumor CUDA plugin of this version)";
        continue;  // never dlclose: nothing of it is in use, and unloading CUDA is not worth the risk
      }
      return;
    }
    p.error = "the CUDA backend librumor_gpu.so could not be loaded (tried: " + tried +
              "); set RUMOR_GPU_LIB to its path, or use --device cpu";
  });
  return p;
}

}  // namespace

bool cuda_built() {
#ifdef RUMOR_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count(std::string* why) {
  if (!cuda_built()) {
    if (why) *why = "this build has no CUDA backend";
    return 0;
  }
  const Plugin& p = plugin();
  if (!p.device_count) {
    if (why) *why = p.error;
    return 0;
  }
  char buf[512] = {};
  const int n = p.device_count(buf, sizeof buf);
  if (why) *why = buf;
  return n;
}

std::shared_ptr<Backend> make_cuda_backend(int index) {
  if (!cuda_built())
    throw std::invalid_argument("--device cuda: CUDA requested but this build has no CUDA backend (rebuild with RUMOR_CUDA=ON "
                                "where nvcc exists)");
  const Plugin& p = plugin();
  if (!p.make_backend) throw std::runtime_error(p.error);
  void* out = nullptr;
  char err[1024] = {};
  const int rc = p.make_backend(index, &out, err, sizeof err);
  if (rc == 1) throw gpu::NoDevice(err);
  if (rc != 0 || !out) throw std::runtime_error(err[0] ? err : "the CUDA backend failed to start");
  auto* holder = static_cast<std::shared_ptr<Backend>*>(out);
  std::shared_ptr<Backend> b = std::move(*holder);
  delete holder;
  return b;
}

}  // namespace rumor::peer
