// The fuzz targets' bodies, one function per target (fuzz/README.md). Each takes any bytes and
// must neither crash, nor trip a sanitizer, nor let an exception other than the documented
// DecodeError escape: hostile input is an error the code reports, never a crash.
//
// They are plain functions so that the same code runs under libFuzzer (fuzz/driver.cpp, built
// with clang and RUMOR_FUZZ=ON) and in the normal test binary test_net, which replays every
// file of fuzz/corpus/ and fuzz/regressions/ through them (tests/net/test_fuzz_corpus.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace rumor::fuzz {

// net::FrameDecoder fed in chunks whose size the input chooses.
int frame(const std::uint8_t* data, std::size_t size);
// The handshake state machine (open and keyed, either role) fed a sequence of frames, some of
// them made valid so that the checks behind the MAC are reached; and the record parsers.
int handshake(const std::uint8_t* data, std::size_t size);
// Every protocol message header's decoder (the first byte picks the type), and the payload views.
int messages(const std::uint8_t* data, std::size_t size);
// The parameter codecs' decoders: fp16, int8, the sparse request and reply.
int codecs(const std::uint8_t* data, std::size_t size);
// A whole Gossip state machine fed a sequence of messages, timers and steps.
int gossip(const std::uint8_t* data, std::size_t size);

struct Target {
  const char* name;
  int (*run)(const std::uint8_t*, std::size_t);
};
inline constexpr Target kTargets[] = {
    {"frame", frame}, {"handshake", handshake}, {"messages", messages}, {"codecs", codecs}, {"gossip", gossip},
};

}  // namespace rumor::fuzz
