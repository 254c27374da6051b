// A protocol message as the core sees it: a type, a small structured header (Cereal binary,
// produced and parsed by the protocol) and an optional bulk payload (raw float32 parameters or
// codec bytes), shared so that one snapshot can be sent without copies.
//
// net/ frames a Message onto TCP (docs/wire.md); sim/ hands it over in memory. Neither looks
// inside `header` beyond the handshake, which net/ owns.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rumor {

using PeerId = std::string;  // a peer's listen address "host:port" (the sim uses "p0", "p1", ...)
using Bytes = std::vector<std::uint8_t>;

// 2: the frame checksum covers the payload through its own digest; 3: the hash is XXH3-64;
// 4: the state transfer can carry the source's extra state after the model; 5: an exchange's
// snapshot can travel in chunks, each its own message; 6: a member's digest carries its samples
// and whether it has finished training; 7: partial views (the Overlay message, JoinReply says
// whether the swarm runs partial views); 8: fragments and the int4 codec (ExchangeMsg's
// fragment, fragments, ref_hash, absolute) (docs/wire.md).
constexpr std::uint16_t kProtocolVersion = 8;

enum class MsgType : std::uint16_t {
  Hello = 1,           // handshake, owned by net/ (version, peer id, model fingerprint)
  JoinRequest = 2,     // a newcomer asks a member for the view
  JoinReply = 3,       // the member's view
  ExchangeRequest = 4, // initiator's snapshot + clock + weight + view digest
  ExchangeReply = 5,   // responder's snapshot + clock + weight + view digest
  ExchangeBusy = 6,    // responder is already in an exchange: try someone else
  StateRequest = 7,    // a joiner asks a member for a chunk of its model and its step
  StateChunk = 8,      // one chunk of that state
  Leave = 9,           // graceful leave: announcement, with the model handed over if it has a payload
  Ping = 10,           // SWIM probe (also: a waiting peer asking for fresh clocks)
  PingReq = 11,        // SWIM indirect probe: "ping this member for me"
  Ack = 12,            // SWIM probe answer (direct, or relayed for an indirect probe)
  LeaveAck = 13,       // the neighbour took a leaving peer's model
  ExchangePayload = 14,  // the initiator's snapshot, after a payload-less ExchangeRequest (streamed exchange)
  ExchangeAccept = 15,   // the responder checked and mixed that snapshot: the initiator may mix the reply
  Overlay = 16,          // partial views (HyParView): join walks, neighbour links, shuffles (core/overlay.hpp)
};
constexpr std::uint16_t kMaxMsgType = 16;

const char* msg_type_name(MsgType t);

struct Message {
  MsgType type = MsgType::Hello;
  Bytes header;                               // Cereal-encoded struct for `type`
  std::shared_ptr<const Bytes> payload;       // may be null
  // hash64 (core/hash.hpp) of *payload, when whoever made or received the payload already
  // computed it (Gossip while copying its snapshot, net/ while receiving); the transport then
  // need not read the payload again to checksum the frame. It must match *payload.
  std::optional<std::uint64_t> payload_digest = std::nullopt;
  // Set by the receiving transport (net/), which checks it in the same pass as the digest
  // while each chunk of the payload is in cache: true if the payload, read as float32 words,
  // holds no NaN or Inf (unset when its size is not a multiple of 4). Never sent on the wire;
  // the protocol computes it itself when it is unset (the simulator, tests).
  std::optional<bool> payload_finite = std::nullopt;
  std::size_t payload_size() const { return payload ? payload->size() : 0; }
};

// The handshake's content (net/ sends and checks it before any other message).
struct Hello {
  std::uint16_t version = kProtocolVersion;
  PeerId peer_id;
  std::string fingerprint;  // Model::fingerprint(): architecture + parameter count + dtype
};

Bytes encode_hello(const Hello& h);
// Throws DecodeError (core/serial.hpp) with a readable reason on malformed input.
Hello decode_hello(std::span<const std::uint8_t> bytes);

}  // namespace rumor
