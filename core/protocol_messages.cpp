// Building the gossip messages (make_message) and decoding their headers (decode_*): every
// decoder checks what it read (view sizes, counts) and throws DecodeError, which Gossip turns
// into a rejection of the sender; payload_floats checks a parameter payload's size. Headers
// only: the byte framing is net/frame.cpp.
#include "core/protocol_messages.hpp"

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstring>

#include "core/serial.hpp"

namespace rumor {

// A list of member digests, written and read field by field in the layout cereal's vector,
// string and enum functions give it (docs/wire.md: a uint64 count; per member a uint64 length
// and the id's bytes, incarnation, state as one byte, clock, samples, done as one byte), with
// the same checks and errors as the generic path (a count or length beyond the bytes left, a
// truncated field, a bool that is not 0 or 1). Every message but a payload carries one: this
// spares cereal's per-field dispatch (9% of the simulator's instructions at 1,000 peers).
// Found by argument-dependent lookup; more specialised than cereal's templates.
void CEREAL_SAVE_FUNCTION_NAME(ByteVectorOutputArchive& ar, const std::vector<MemberDigest>& v) {
  const std::uint64_t n = v.size();
  ar.saveBinary(&n, sizeof n);
  for (const MemberDigest& d : v) {
    const std::uint64_t len = d.id.size();
    ar.saveBinary(&len, sizeof len);
    ar.saveBinary(d.id.data(), d.id.size());
    ar.saveBinary(&d.incarnation, sizeof d.incarnation);
    const auto state = static_cast<std::uint8_t>(d.state);
    ar.saveBinary(&state, 1);
    ar.saveBinary(&d.clock, sizeof d.clock);
    ar.saveBinary(&d.samples, sizeof d.samples);
    const std::uint8_t done = d.done ? 1 : 0;
    ar.saveBinary(&done, 1);
  }
}

void CEREAL_LOAD_FUNCTION_NAME(SafeBinaryInputArchive& ar, std::vector<MemberDigest>& v) {
  const auto length = [&ar] {  // serial.hpp's size tag: read, and checked against the bytes left
    std::uint64_t n = 0;
    auto tag = cereal::make_size_tag(n);
    CEREAL_SERIALIZE_FUNCTION_NAME(ar, tag);
    return static_cast<std::size_t>(n);
  };
  v.resize(length());
  for (MemberDigest& d : v) {
    d.id.resize(length());
    ar.loadBinary(d.id.data(), d.id.size());
    ar.loadBinary(&d.incarnation, sizeof d.incarnation);
    std::uint8_t state = 0;
    ar.loadBinary(&state, 1);
    d.state = static_cast<MemberState>(state);
    ar.loadBinary(&d.clock, sizeof d.clock);
    ar.loadBinary(&d.samples, sizeof d.samples);
    CEREAL_LOAD_FUNCTION_NAME(ar, d.done);
  }
}

Message make_message(const JoinRequestMsg& m) { return {MsgType::JoinRequest, encode_struct(m), nullptr}; }
Message make_message(const JoinReplyMsg& m) { return {MsgType::JoinReply, encode_struct(m), nullptr}; }
Message make_message(MsgType type, const ExchangeMsg& m, std::shared_ptr<const Bytes> payload) {
  return {type, encode_struct(m), std::move(payload)};
}
Message make_message(const ExchangeBusyMsg& m) { return {MsgType::ExchangeBusy, encode_struct(m), nullptr}; }
Message make_message(MsgType type, const PingMsg& m) { return {type, encode_struct(m), nullptr}; }
Message make_message(const PingReqMsg& m) { return {MsgType::PingReq, encode_struct(m), nullptr}; }
Message make_message(const StateRequestMsg& m) { return {MsgType::StateRequest, encode_struct(m), nullptr}; }
Message make_message(const StateChunkMsg& m, std::shared_ptr<const Bytes> payload) {
  return {MsgType::StateChunk, encode_struct(m), std::move(payload)};
}
Message make_message(const LeaveMsg& m, std::shared_ptr<const Bytes> payload) {
  return {MsgType::Leave, encode_struct(m), std::move(payload)};
}
Message make_message(const OverlayMsg& m) { return {MsgType::Overlay, encode_struct(m), nullptr}; }

namespace {
void check_view(const std::vector<MemberDigest>& v, const char* what) {
  for (const auto& d : v) {
    if (d.id.empty() || d.id.size() > 255) throw DecodeError(std::string("malformed ") + what + ": bad member id");
    if (static_cast<std::uint8_t>(d.state) > 3) throw DecodeError(std::string("malformed ") + what + ": bad member state");
  }
}
}  // namespace

JoinRequestMsg decode_join_request(const Message& m) {
  auto r = decode_struct<JoinRequestMsg>(m.header, "JoinRequest");
  check_view({r.self}, "JoinRequest");
  return r;
}
JoinReplyMsg decode_join_reply(const Message& m) {
  auto r = decode_struct<JoinReplyMsg>(m.header, "JoinReply");
  check_view(r.members, "JoinReply");
  return r;
}
ExchangeMsg decode_exchange(const Message& m) {
  auto r = decode_struct<ExchangeMsg>(m.header, msg_type_name(m.type));
  if (static_cast<std::uint8_t>(r.codec) > kMaxPayloadCodec)
    throw DecodeError("unknown payload codec " + std::to_string(int(r.codec)));
  if (r.fragments == 0 || r.fragments > kMaxFragments || r.fragment >= r.fragments)
    throw DecodeError(std::string("malformed ") + msg_type_name(m.type) + ": fragment " + std::to_string(r.fragment) + " of " +
                      std::to_string(r.fragments) + " (at most " + std::to_string(kMaxFragments) + " fragments)");
  check_view(r.view, msg_type_name(m.type));
  return r;
}
ExchangeBusyMsg decode_busy(const Message& m) {
  auto r = decode_struct<ExchangeBusyMsg>(m.header, "ExchangeBusy");
  check_view(r.view, "ExchangeBusy");
  return r;
}

PingMsg decode_ping(const Message& m) {
  auto r = decode_struct<PingMsg>(m.header, msg_type_name(m.type));
  check_view(r.view, msg_type_name(m.type));
  return r;
}

PingReqMsg decode_ping_req(const Message& m) {
  auto r = decode_struct<PingReqMsg>(m.header, "PingReq");
  check_view(r.view, "PingReq");
  if (r.target.empty() || r.target.size() > 255) throw DecodeError("malformed PingReq: bad target");
  return r;
}
StateRequestMsg decode_state_request(const Message& m) { return decode_struct<StateRequestMsg>(m.header, "StateRequest"); }
StateChunkMsg decode_state_chunk(const Message& m) {
  auto r = decode_struct<StateChunkMsg>(m.header, "StateChunk");
  check_view(r.view, "StateChunk");
  return r;
}
LeaveMsg decode_leave(const Message& m) {
  auto r = decode_struct<LeaveMsg>(m.header, "Leave");
  check_view(r.view, "Leave");
  return r;
}

OverlayMsg decode_overlay(const Message& m) {
  auto r = decode_struct<OverlayMsg>(m.header, "Overlay");
  if (static_cast<std::uint8_t>(r.kind) > kMaxOverlayKind)
    throw DecodeError("malformed Overlay: unknown kind " + std::to_string(int(r.kind)));
  if (r.ttl > kMaxOverlayTtl) throw DecodeError("malformed Overlay: ttl " + std::to_string(int(r.ttl)) + " over the limit");
  if (r.peers.size() > kMaxOverlayPeers)
    throw DecodeError("malformed Overlay: " + std::to_string(r.peers.size()) + " peers in a sample (at most " +
                      std::to_string(kMaxOverlayPeers) + ")");
  const bool has_subject = r.kind == OverlayKind::ForwardJoin || r.kind == OverlayKind::Shuffle ||
                           r.kind == OverlayKind::ShuffleReply;
  if (has_subject) check_view({r.subject}, "Overlay");
  check_view(r.peers, "Overlay");
  check_view(r.view, "Overlay");
  if (r.view.empty()) throw DecodeError("malformed Overlay: no sender digest");
  return r;
}

std::span<const float> as_floats(const Bytes& b) {
  // operator new aligns to at least 16 bytes, so a byte buffer can be read as floats.
  return {reinterpret_cast<const float*>(b.data()), b.size() / sizeof(float)};
}

std::shared_ptr<const Bytes> encode_params(std::span<const float> params) {
  auto b = std::make_shared<Bytes>(params.size() * sizeof(float));
  std::memcpy(b->data(), params.data(), b->size());
  return b;
}

std::span<const float> payload_floats(const Message& m, std::uint64_t param_count) {
  const std::size_t want = static_cast<std::size_t>(param_count) * sizeof(float);
  if (!m.payload || m.payload->size() != want)
    throw DecodeError("payload of " + std::to_string(m.payload_size()) + " bytes, expected " +
                      std::to_string(want) + " (" + std::to_string(param_count) + " float32)");
  return as_floats(*m.payload);
}

}  // namespace rumor
