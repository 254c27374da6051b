// Frame encoding, the frame checksum and the incremental decoder (see frame.hpp, docs/wire.md).
//
// Byte order is written out explicitly (no struct punning), so the format is the same on every
// host. The hash itself is core/hash.cpp.
#include "net/frame.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/check.hpp"
#include "core/mix.hpp"

namespace rumor::net {

namespace {

void put16(std::uint8_t* p, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint64_t get_le(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

std::string hex(std::uint64_t v, int width) { return fmt::format("0x{:0{}x}", v, width); }

}  // namespace

// Zeroing a fresh 100 MB buffer in 4 KiB page faults costs more than receiving it; with 2 MiB
// pages it is several times cheaper. (A memory hint only; harmless where it is refused.)
static Bytes fresh_bytes(std::size_t n) {
  Bytes b;
  b.reserve(n);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::size_t kHuge = 2u << 20;
  if (n >= 4 * kHuge) {
    const auto begin = (reinterpret_cast<std::uintptr_t>(b.data()) + kHuge - 1) & ~(kHuge - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(b.data()) + n) & ~(kHuge - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#endif
  b.resize(n);  // zeroes (and faults in) the pages
  return b;
}

std::shared_ptr<Bytes> allocate_payload(std::size_t n) {
  return std::make_shared<Bytes>(fresh_bytes(n));
}

std::shared_ptr<PayloadPool> PayloadPool::create(std::size_t max_idle_bytes) {
  return std::shared_ptr<PayloadPool>(new PayloadPool(max_idle_bytes));
}

std::shared_ptr<Bytes> PayloadPool::get(std::size_t n) {
  std::unique_ptr<Bytes> buf;
  {
    std::lock_guard lk(mu_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if ((*it)->size() != n) continue;
      buf = std::move(*it);
      idle_.erase(it);
      idle_bytes_ -= n;
      ++reused_;
      break;
    }
  }
  if (!buf) buf = std::make_unique<Bytes>(fresh_bytes(n));
  std::weak_ptr<PayloadPool> home = weak_from_this();
  return std::shared_ptr<Bytes>(buf.release(), [home](Bytes* b) {
    if (auto pool = home.lock()) pool->give_back(b);
    else delete b;
  });
}

void PayloadPool::give_back(Bytes* b) {
  std::unique_ptr<Bytes> owned(b);
  std::lock_guard lk(mu_);
  if (owned->size() > max_idle_bytes_) return;
  // Keep the most recent buffers: evict the oldest until the newcomer fits.
  while (idle_bytes_ + owned->size() > max_idle_bytes_ && !idle_.empty()) {
    idle_bytes_ -= idle_.front()->size();
    idle_.erase(idle_.begin());
  }
  idle_bytes_ += owned->size();
  idle_.push_back(std::move(owned));
}

std::size_t PayloadPool::idle_bytes() const {
  std::lock_guard lk(mu_);
  return idle_bytes_;
}

std::uint64_t PayloadPool::reused() const {
  std::lock_guard lk(mu_);
  return reused_;
}

// ---- encoding -------------------------------------------------------------------------------

std::array<std::uint8_t, kFrameHeaderSize> write_frame_header(const FrameHeader& h) {
  std::array<std::uint8_t, kFrameHeaderSize> b{};
  put32(&b[0], h.magic);
  put16(&b[4], h.version);
  put16(&b[6], h.type);
  put32(&b[8], h.header_len);
  put32(&b[12], h.flags);
  put64(&b[16], h.payload_len);
  put64(&b[24], h.checksum);
  return b;
}

FrameHeader read_frame_header(std::span<const std::uint8_t, kFrameHeaderSize> b) {
  FrameHeader h;
  h.magic = static_cast<std::uint32_t>(get_le(&b[0], 4));
  h.version = static_cast<std::uint16_t>(get_le(&b[4], 2));
  h.type = static_cast<std::uint16_t>(get_le(&b[6], 2));
  h.header_len = static_cast<std::uint32_t>(get_le(&b[8], 4));
  h.flags = static_cast<std::uint32_t>(get_le(&b[12], 4));
  h.payload_len = get_le(&b[16], 8);
  h.checksum = get_le(&b[24], 8);
  return h;
}

std::uint64_t frame_checksum_with_digest(const FrameHeader& h, std::span<const std::uint8_t> header,
                                         std::uint64_t payload_digest) {
  FrameHeader zeroed = h;
  zeroed.checksum = 0;
  const auto fixed = write_frame_header(zeroed);
  std::array<std::uint8_t, 8> d{};
  put64(d.data(), payload_digest);
  FrameHasher hasher;
  hasher.update(fixed);
  hasher.update(header);
  hasher.update(d);
  return hasher.digest();
}

std::uint64_t frame_checksum(const FrameHeader& h, std::span<const std::uint8_t> header,
                             std::span<const std::uint8_t> payload) {
  return frame_checksum_with_digest(h, header, hash64(payload));
}

std::array<std::uint8_t, kFrameHeaderSize> encode_frame_header(const Message& msg) {
  RUMOR_CHECK(msg.header.size() <= 0xFFFFFFFFu, "message header too large for a frame");
  FrameHeader h;
  h.type = static_cast<std::uint16_t>(msg.type);
  h.header_len = static_cast<std::uint32_t>(msg.header.size());
  h.payload_len = msg.payload_size();
  std::span<const std::uint8_t> payload;
  if (msg.payload) payload = *msg.payload;
  // A digest the producer computed while making the payload saves a pass over it here.
  const std::uint64_t digest = msg.payload && msg.payload_digest ? *msg.payload_digest : hash64(payload);
  h.checksum = frame_checksum_with_digest(h, msg.header, digest);
  return write_frame_header(h);
}

Bytes encode_frame(const Message& msg) {
  const auto fixed = encode_frame_header(msg);
  // resize + memcpy rather than three inserts: GCC 12 warns falsely (-Wstringop-overflow) on
  // the inserts.
  Bytes out(fixed.size() + msg.header.size() + msg.payload_size());
  std::uint8_t* p = out.data();
  std::memcpy(p, fixed.data(), fixed.size());
  p += fixed.size();
  if (!msg.header.empty()) std::memcpy(p, msg.header.data(), msg.header.size());
  p += msg.header.size();
  if (msg.payload_size() > 0) std::memcpy(p, msg.payload->data(), msg.payload->size());
  return out;
}

// ---- decoding -------------------------------------------------------------------------------

std::uint64_t FrameDecoder::frame_bytes_expected() const {
  if (state_ == State::Fixed || state_ == State::Bad) return kFrameHeaderSize;
  return kFrameHeaderSize + fh_.header_len + fh_.payload_len;
}

FrameDecoder::Result FrameDecoder::fail(std::string reason) {
  state_ = State::Bad;
  reason_ = std::move(reason);
  header_.clear();
  header_.shrink_to_fit();
  payload_.reset();
  return {Status::Bad, reason_};
}

std::span<std::uint8_t> FrameDecoder::prepare() {
  switch (state_) {
    case State::Fixed: return std::span<std::uint8_t>(fixed_).subspan(filled_);
    case State::Header: return std::span<std::uint8_t>(header_).subspan(filled_);
    case State::Payload:
      return std::span<std::uint8_t>(*payload_).subspan(filled_, std::min(kPayloadStep, payload_->size() - filled_));
    case State::Ready: RUMOR_CHECK(false, "FrameDecoder::prepare() before take()");
    case State::Bad: RUMOR_CHECK(false, "FrameDecoder::prepare() after Bad: " + reason_);
  }
  return {};
}

FrameDecoder::Result FrameDecoder::commit(std::size_t n) {
  if (state_ == State::Bad) return {Status::Bad, reason_};
  RUMOR_CHECK(state_ != State::Ready, "FrameDecoder::commit() before take()");
  RUMOR_CHECK(n <= prepare().size(), "committed more bytes than prepared");
  if (n == 0) return {};
  received_ += n;
  switch (state_) {
    case State::Fixed: {
      const std::size_t before = filled_;
      filled_ += n;
      // Refuse a stranger as soon as its first bytes show it, not only after 32 of them (an
      // HTTP request or a port scanner may never send 32).
      if (before < 4 && filled_ >= 4 && get_le(&fixed_[0], 4) != kFrameMagic)
        return fail("bad magic " + hex(get_le(&fixed_[0], 4), 8) + " (not a Rumor peer?)");
      if (filled_ < kFrameHeaderSize) return {};
      return parse_fixed();
    }
    case State::Header:
      hasher_.update(std::span<const std::uint8_t>(header_).subspan(filled_, n));
      filled_ += n;
      if (filled_ < header_.size()) return {};
      return enter_payload_or_finish();
    case State::Payload: {
      payload_hasher_.update(std::span<const std::uint8_t>(*payload_).subspan(filled_, n));
      filled_ += n;
      // The whole float32 words landed so far, while they are in cache (a word cut by a read
      // waits for the rest). The buffer is a vector's: aligned for float.
      const std::size_t words_end = filled_ & ~std::size_t{3};
      if (payload_finite_ && words_end > finite_checked_)
        payload_finite_ = all_finite({reinterpret_cast<const float*>(payload_->data() + finite_checked_),
                                      (words_end - finite_checked_) / 4});
      finite_checked_ = words_end;
      if (filled_ < payload_->size()) return {};
      return finish();
    }
    default: break;
  }
  return {};
}

FrameDecoder::Result FrameDecoder::parse_fixed() {
  fh_ = read_frame_header(fixed_);
  // Magic and version first: nothing else in a header is meaningful if they are wrong.
  if (fh_.magic != kFrameMagic)
    return fail("bad magic " + hex(fh_.magic, 8) + " (not a Rumor peer?)");
  if (fh_.version != kProtocolVersion)
    return fail("protocol version " + std::to_string(fh_.version) + ", we speak " +
                std::to_string(kProtocolVersion));
  if (fh_.type == 0 || fh_.type > kMaxMsgType)
    return fail("unknown message type " + std::to_string(fh_.type));
  if (fh_.flags != 0) return fail("reserved flags " + hex(fh_.flags, 8) + " set");
  if (fh_.header_len > limits_.max_header_bytes)
    return fail("header of " + std::to_string(fh_.header_len) + " bytes exceeds the limit of " +
                std::to_string(limits_.max_header_bytes));
  if (fh_.payload_len > limits_.max_payload_bytes)
    return fail("payload of " + std::to_string(fh_.payload_len) + " bytes exceeds the limit of " +
                std::to_string(limits_.max_payload_bytes));
  // Only now, with both lengths within the limits, is anything allocated.
  FrameHeader zeroed = fh_;
  zeroed.checksum = 0;
  hasher_.reset();
  hasher_.update(write_frame_header(zeroed));
  payload_hasher_.reset();
  finite_checked_ = 0;
  payload_finite_ = true;
  header_.assign(fh_.header_len, 0);
  filled_ = 0;
  if (fh_.header_len > 0) {
    state_ = State::Header;
    return {};
  }
  return enter_payload_or_finish();
}

FrameDecoder::Result FrameDecoder::enter_payload_or_finish() {
  filled_ = 0;
  if (fh_.payload_len == 0) return finish();
  const auto n = static_cast<std::size_t>(fh_.payload_len);
  payload_ = pool_ ? pool_->get(n) : allocate_payload(n);
  state_ = State::Payload;
  return {};
}

FrameDecoder::Result FrameDecoder::finish() {
  payload_digest_ = payload_hasher_.digest();
  std::array<std::uint8_t, 8> d{};
  put64(d.data(), payload_digest_);
  hasher_.update(d);
  const std::uint64_t computed = hasher_.digest();
  if (computed != fh_.checksum)
    return fail("checksum mismatch: frame says " + hex(fh_.checksum, 16) + ", bytes hash to " +
                hex(computed, 16) + " (corrupted in transit?)");
  state_ = State::Ready;
  return {Status::Good, {}};
}

Message FrameDecoder::take() {
  RUMOR_CHECK(state_ == State::Ready, "FrameDecoder::take() without a message");
  Message m;
  m.type = static_cast<MsgType>(fh_.type);
  m.header = std::move(header_);
  m.payload = std::move(payload_);
  if (m.payload) {
    m.payload_digest = payload_digest_;
    if (m.payload->size() % 4 == 0) m.payload_finite = payload_finite_;
  }
  header_ = Bytes{};
  payload_.reset();
  state_ = State::Fixed;
  filled_ = 0;
  received_ = 0;
  return m;
}

FrameDecoder::Result FrameDecoder::feed(std::span<const std::uint8_t> bytes,
                                        std::vector<Message>& out) {
  if (state_ == State::Bad) return {Status::Bad, reason_};
  Result last;
  while (!bytes.empty()) {
    if (state_ == State::Ready) out.push_back(take());
    const auto dst = prepare();
    const std::size_t n = std::min(dst.size(), bytes.size());
    std::memcpy(dst.data(), bytes.data(), n);
    bytes = bytes.subspan(n);
    last = commit(n);
    if (last.bad()) return last;
  }
  if (state_ == State::Ready) {
    out.push_back(take());
    return {Status::Good, {}};
  }
  return {Status::NeedMore, {}};
}

}  // namespace rumor::net
