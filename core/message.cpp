// Message type names for logs, and the Hello of the handshake (Cereal, checked on decode: a
// peer id of 1..255 bytes, a fingerprint of at most 1 KiB). The other messages' headers are
// core/protocol_messages.cpp; framing on the wire is net/frame.cpp.
#include "core/message.hpp"

#include <cereal/types/string.hpp>
#include <stdexcept>

#include "core/serial.hpp"

namespace rumor {

const char* msg_type_name(MsgType t) {
  switch (t) {
    case MsgType::Hello: return "Hello";
    case MsgType::JoinRequest: return "JoinRequest";
    case MsgType::JoinReply: return "JoinReply";
    case MsgType::ExchangeRequest: return "ExchangeRequest";
    case MsgType::ExchangeReply: return "ExchangeReply";
    case MsgType::ExchangeBusy: return "ExchangeBusy";
    case MsgType::StateRequest: return "StateRequest";
    case MsgType::StateChunk: return "StateChunk";
    case MsgType::Leave: return "Leave";
    case MsgType::Ping: return "Ping";
    case MsgType::PingReq: return "PingReq";
    case MsgType::Ack: return "Ack";
    case MsgType::LeaveAck: return "LeaveAck";
    case MsgType::ExchangePayload: return "ExchangePayload";
    case MsgType::ExchangeAccept: return "ExchangeAccept";
    case MsgType::Overlay: return "Overlay";
  }
  return "Unknown";
}

template <class Archive>
void serialize(Archive& ar, Hello& h) {
  ar(h.version, h.peer_id, h.fingerprint);
}

Bytes encode_hello(const Hello& h) { return encode_struct(h); }

Hello decode_hello(std::span<const std::uint8_t> bytes) {
  Hello h = decode_struct<Hello>(bytes, "Hello");
  if (h.peer_id.empty() || h.peer_id.size() > 255) throw DecodeError("malformed Hello: bad peer id");
  if (h.fingerprint.size() > 1024) throw DecodeError("malformed Hello: fingerprint too long");
  return h;
}

}  // namespace rumor
