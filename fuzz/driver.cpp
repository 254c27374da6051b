// libFuzzer entry point for one target of targets.hpp, chosen at compile time
// (RUMOR_FUZZ_TARGET=frame, handshake, ...; fuzz/CMakeLists.txt builds one binary per target).
#include <cstddef>
#include <cstdint>

#include "fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return rumor::fuzz::RUMOR_FUZZ_TARGET(data, size);
}
