// Linked into the rumor-peer executable only (peer/CMakeLists.txt), where it interposes on
// glibc's pthread_attr_setstacksize: a thread asked for with a stack too small to also hold
// this process's static TLS gets a bigger one.
//
// Why: civetweb (under prometheus-cpp's Exposer, the --metrics-listen endpoint) is built by
// Debian with fixed 100 KiB thread stacks, and glibc places every thread's static TLS on its
// stack. A CUDA build of rumor-peer loads cuBLAS at start, whose static TLS alone is about
// 100 KiB (libcublasLt: 94 KiB), so pthread_create refuses civetweb's threads (EINVAL; civetweb
// reports "Cannot create threads"). Raising small requests to kMinStack costs only address
// space. The Python module does not need it: CUDA libraries dlopened with it keep their TLS off
// the thread stacks.
#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>

namespace {
constexpr std::size_t kMinStack = std::size_t{1} << 20;  // 1 MiB: static TLS with room to spare
using SetStackSize = int (*)(pthread_attr_t*, std::size_t);
}  // namespace

extern "C" __attribute__((visibility("default"))) int pthread_attr_setstacksize(pthread_attr_t* attr, std::size_t size) {
  static const auto real = reinterpret_cast<SetStackSize>(::dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (!real) return 22;  // EINVAL: nothing to forward to (cannot happen with glibc)
  return real(attr, size < kMinStack ? kMinStack : size);
}
