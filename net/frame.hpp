// Framing of core Messages on a byte stream (docs/wire.md is the byte-by-byte description).
//
// A frame is a fixed 32-byte little-endian header, then `header_len` bytes of Cereal-encoded
// message header, then `payload_len` bytes of raw payload. The fixed header carries a 64-bit
// checksum (FrameHasher) over the whole frame.
//
// This file is pure: no sockets, no clocks, no threads. FrameDecoder is an incremental parser in
// the style of the asio http server's request_parser (good / bad / need more), but zero-copy:
// the caller reads straight into the buffers prepare() hands out, so a 100 MB payload lands in
// its final allocation and is hashed while it is still in cache. Lengths are checked against
// FrameLimits before anything is allocated, so hostile input can never make it allocate more
// than the limits allow. That makes it the one place to fuzz (feed()).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/hash.hpp"
#include "core/message.hpp"

namespace rumor::net {

// On the wire the magic reads as the ASCII bytes 'R' 'M' 'R' '1' (so a hex dump shows "RMR1");
// as a little-endian u32 that is 0x31524D52.
constexpr std::uint32_t kFrameMagic = 0x31524D52u;
constexpr std::size_t kFrameHeaderSize = 32;

// The fixed header's fields, as they are on the wire (no validation implied).
struct FrameHeader {
  std::uint32_t magic = kFrameMagic;
  std::uint16_t version = kProtocolVersion;
  std::uint16_t type = 0;
  std::uint32_t header_len = 0;
  std::uint32_t flags = 0;  // reserved: must be 0
  std::uint64_t payload_len = 0;
  std::uint64_t checksum = 0;
};

std::array<std::uint8_t, kFrameHeaderSize> write_frame_header(const FrameHeader& h);
FrameHeader read_frame_header(std::span<const std::uint8_t, kFrameHeaderSize> bytes);

// The streaming 64-bit hash of the checksum, XXH3-64 (core/hash.hpp; docs/wire.md). Feeding
// the same bytes in any chunking gives the same digest. It is not a MAC: it catches corruption
// and bugs, not attackers.
using FrameHasher = rumor::Hasher64;
using rumor::hash64;

// The frame checksum (protocol version 3): the hash of the fixed header with its checksum field
// zeroed, then the header bytes, then the 8 bytes (little-endian) of hash64(payload). The
// payload is covered through its own digest, so a sender that hashed its payload while making
// it (Message::payload_digest) need not read it again, and a receiver hashes it as it lands.
std::uint64_t frame_checksum(const FrameHeader& h, std::span<const std::uint8_t> header,
                             std::span<const std::uint8_t> payload);
std::uint64_t frame_checksum_with_digest(const FrameHeader& h, std::span<const std::uint8_t> header,
                                         std::uint64_t payload_digest);

// The 32-byte fixed header for `msg`, checksum included. The sender writes it, msg.header and
// *msg.payload as three buffers (scatter-gather), so the payload is never copied. Uses
// msg.payload_digest when the producer set it; otherwise hashes the payload once here.
std::array<std::uint8_t, kFrameHeaderSize> encode_frame_header(const Message& msg);
// The whole frame in one contiguous buffer (copies the payload): for tests and tools.
Bytes encode_frame(const Message& msg);

// Recycles payload buffers. A fresh 100 MB buffer costs tens of milliseconds of page faults
// and zeroing (more than receiving it over loopback), and a trainer receives same-sized model
// snapshots over and over; so a payload's buffer, once its last user drops it, goes back here
// (up to max_idle_bytes of idle buffers) and the next payload of exactly that size reuses it.
// Thread-safe: the last user may drop a payload on any thread. Buffers handed out by get()
// have unspecified contents; the decoder overwrites all of them before delivering.
class PayloadPool : public std::enable_shared_from_this<PayloadPool> {
 public:
  static std::shared_ptr<PayloadPool> create(std::size_t max_idle_bytes);
  std::shared_ptr<Bytes> get(std::size_t n);
  std::size_t idle_bytes() const;
  std::uint64_t reused() const;  // how many get() calls were served from the pool

 private:
  explicit PayloadPool(std::size_t max_idle_bytes) : max_idle_bytes_(max_idle_bytes) {}
  void give_back(Bytes* b);
  std::size_t max_idle_bytes_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Bytes>> idle_;
  std::size_t idle_bytes_ = 0;
  std::uint64_t reused_ = 0;
};

// A buffer of n zero bytes; large ones are backed by transparent huge pages where the kernel
// offers them (a memory hint only).
std::shared_ptr<Bytes> allocate_payload(std::size_t n);

struct FrameLimits {
  std::size_t max_header_bytes = 1u << 20;
  std::uint64_t max_payload_bytes = 2ull << 30;
};

class FrameDecoder {
 public:
  enum class Status { Good, NeedMore, Bad };
  struct Result {
    Status status = Status::NeedMore;
    std::string reason;  // set when Bad
    bool good() const { return status == Status::Good; }
    bool bad() const { return status == Status::Bad; }
  };

  // `pool`, if given, supplies the payload buffers (see PayloadPool).
  explicit FrameDecoder(FrameLimits limits = {}, std::shared_ptr<PayloadPool> pool = nullptr)
      : limits_(limits), pool_(std::move(pool)) {}

  // Limits apply from the next fixed header parsed (the transport tightens them until the
  // handshake is done).
  void set_limits(FrameLimits limits) { limits_ = limits; }
  const FrameLimits& limits() const { return limits_; }

  // Where the next incoming bytes go: the rest of the fixed header, then of the header buffer,
  // then of the payload buffer, at most kPayloadStep bytes of it at a time (so that the chunk a
  // read lands is still in cache when commit() hashes and checks it). Never spans two frames,
  // so a caller reading into it never reads past the current frame. Not to be called while a
  // message waits for take() or after Bad.
  std::span<std::uint8_t> prepare();
  // Records that `n` bytes (at most prepare().size()) were written into the prepared span.
  // Payload bytes are hashed and checked for non-finite float32 words here, in one visit
  // (Message::payload_digest, Message::payload_finite). Good: a whole, checksummed frame is
  // ready for take(). Bad is final.
  Result commit(std::size_t n);
  // The decoded message; the decoder then waits for the next frame.
  Message take();

  // Copies `bytes` through prepare()/commit(), appending every completed message to `out`.
  // Returns Bad if any frame was bad (and stops there), Good if the input ended exactly at the
  // end of a frame, NeedMore otherwise. For tests and fuzzers.
  Result feed(std::span<const std::uint8_t> bytes, std::vector<Message>& out);

  bool bad() const { return state_ == State::Bad; }
  const std::string& reason() const { return reason_; }
  bool has_message() const { return state_ == State::Ready; }
  // True when some, but not all, bytes of a frame have arrived.
  bool in_frame() const { return state_ != State::Ready && state_ != State::Bad && received_ > 0; }
  // Bytes of the current frame received so far, and the frame's size as far as known (32 until
  // the fixed header is complete, then the whole frame).
  std::uint64_t frame_bytes_received() const { return received_; }
  std::uint64_t frame_bytes_expected() const;

 private:
  static constexpr std::size_t kPayloadStep = 256u << 10;
  enum class State { Fixed, Header, Payload, Ready, Bad };
  Result fail(std::string reason);
  Result parse_fixed();
  Result enter_payload_or_finish();
  Result finish();

  FrameLimits limits_;
  std::shared_ptr<PayloadPool> pool_;
  State state_ = State::Fixed;
  std::string reason_;
  std::array<std::uint8_t, kFrameHeaderSize> fixed_{};
  FrameHeader fh_{};
  std::size_t filled_ = 0;        // bytes of the current region (fixed/header/payload) filled
  std::uint64_t received_ = 0;    // bytes of the current frame
  FrameHasher hasher_;          // fixed header (checksum zeroed) + header section
  FrameHasher payload_hasher_;  // the payload, as it lands
  std::uint64_t payload_digest_ = 0;
  std::size_t finite_checked_ = 0;  // payload bytes (whole float32 words) checked so far
  bool payload_finite_ = true;
  Bytes header_;
  std::shared_ptr<Bytes> payload_;
};

}  // namespace rumor::net
