// The structured headers of the gossip messages (Cereal binary inside a frame's header
// section; docs/wire.md). Bulk parameters travel in the frame payload, never in here.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/codec.hpp"
#include "core/message.hpp"
#include "core/view.hpp"

namespace rumor {


struct JoinRequestMsg {
  MemberDigest self;
  std::string fingerprint;
  template <class A> void serialize(A& ar) { ar(self, fingerprint); }
};

struct JoinReplyMsg {
  std::vector<MemberDigest> members;  // the responder's whole view, itself first
  // Version 7: the responder runs partial views (the joiner then keeps bounded views too, and
  // `members` is its active and passive views), and its estimate of the swarm's size.
  bool partial = false;
  std::uint64_t size_hint = 0;
  template <class A> void serialize(A& ar) { ar(members, partial, size_hint); }
};

// Partial views (version 7; core/overlay.hpp, core/gossip_overlay.cpp): one message type whose
// `kind` says what it is, as in HyParView (Leitao et al. 2007).
enum class OverlayKind : std::uint8_t {
  ForwardJoin = 0,     // `subject` joined through a member: a random walk of `ttl` hops more
  Neighbor = 1,        // "take me into your active view" (`priority`: my active view is empty)
  NeighborAccept = 2,  // taken: both sides now hold each other in their active views
  NeighborReject = 3,  // not taken (the active view is full): try another
  Disconnect = 4,      // "I dropped you from my active view" (you may keep me as passive)
  Shuffle = 5,         // `subject`'s sample of its views (`peers`), walking `ttl` hops more
  ShuffleReply = 6,    // the walk's end answers `subject` with a sample of its passive view
};
constexpr std::uint8_t kMaxOverlayKind = 6;
constexpr std::uint8_t kMaxOverlayTtl = 32;
constexpr std::size_t kMaxOverlayPeers = 64;
struct OverlayMsg {
  OverlayKind kind = OverlayKind::Neighbor;
  std::uint8_t ttl = 0;
  bool priority = false;
  bool ready = false;             // the sender has a model to give a joiner (state transfer)
  MemberDigest subject;           // ForwardJoin: the joiner; Shuffle, ShuffleReply: the origin
  std::vector<MemberDigest> peers;  // Shuffle, ShuffleReply: the sample (at most kMaxOverlayPeers)
  std::vector<MemberDigest> view;   // piggybacked membership (sender first)
  template <class A> void serialize(A& ar) { ar(kind, ttl, priority, ready, subject, peers, view); }
};

// Request, reply, payload and accept of a push-pull exchange carry the same fields.
struct ExchangeMsg {
  std::uint64_t exchange_id = 0;  // chosen by the initiator, echoed in the reply
  std::uint64_t clock = 0;        // sender's local steps at its snapshot
  double weight = 1.0;            // sender's mixing weight (1, or samples processed)
  PayloadCodec codec = PayloadCodec::None;
  std::uint64_t param_count = 0;
  std::vector<MemberDigest> view; // piggybacked membership (sender first; empty in later chunks)
  // Version 5: a codec-none snapshot (ExchangePayload, ExchangeReply) may travel as several
  // messages of the same exchange, in order, each holding `chunk` floats from `offset` (the
  // last one what is left), so that the sender hands each to the transport as soon as it is
  // copied and the receiver checks each as it lands. chunk 0: the whole model in this one
  // message (offset 0). A chunk is at least kMinExchangeChunk floats unless it is the model.
  std::uint64_t offset = 0;
  std::uint64_t chunk = 0;
  // Version 8. Fragments (Streaming DiLoCo): the parameter vector is cut into `fragments`
  // contiguous near-equal ranges (fragment_lo()), and this exchange averages only range
  // `fragment`, chosen by the initiator (its k-th exchange: k mod fragments) and echoed by every
  // message of the exchange. Every payload holds that range only; `offset` and `chunk` count
  // from its start. fragments 1: the whole model (fragment 0).
  std::uint32_t fragment = 0;
  std::uint32_t fragments = 1;
  // Version 8, codec int4 (core/codec_refs.hpp): in a request, the hash of the initiator's two
  // references of this pair over the range (0: it holds none); the reply and the payload echo
  // the responder's verdict in `absolute`: the references matched, and the payloads are
  // Q4(x - ref) (false), or they did not, and both directions send absolute int8 (true).
  std::uint64_t ref_hash = 0;
  bool absolute = false;
  template <class A> void serialize(A& ar) {
    ar(exchange_id, clock, weight, codec, param_count, view, offset, chunk, fragment, fragments, ref_hash, absolute);
  }
  // The first parameter of fragment k of F over n parameters: ranges of near-equal size.
  static std::uint64_t fragment_lo(std::uint64_t n, std::uint64_t k, std::uint64_t f) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(n) * k) / f);
  }
  std::uint64_t range_lo() const { return fragment_lo(param_count, fragment, fragments); }
  std::uint64_t range_len() const { return fragment_lo(param_count, fragment + 1, fragments) - range_lo(); }
  // Floats per message of this snapshot (the whole range for chunk 0), and this message's.
  std::uint64_t chunk_floats() const { return chunk == 0 || chunk > range_len() ? range_len() : chunk; }
  std::uint64_t floats_here() const { return offset < range_len() ? std::min(chunk_floats(), range_len() - offset) : 0; }
};
// Most fragments a model may be cut into (a knob's bound, and what decoding accepts).
constexpr std::uint32_t kMaxFragments = 64;
constexpr std::uint64_t kMinExchangeChunk = 1u << 16;  // floats (256 KiB)

// SWIM-style probe and its answer; both carry a view digest (and so everyone's clock).
struct PingMsg {
  std::uint64_t seq = 0;
  std::vector<MemberDigest> view;
  PeerId about;  // Ack relayed for an indirect probe: the member that answered (else empty)
  template <class A> void serialize(A& ar) { ar(seq, view, about); }
};

struct PingReqMsg {
  std::uint64_t seq = 0;  // the requester's probe number, echoed in the relayed Ack
  PeerId target;
  std::vector<MemberDigest> view;
  template <class A> void serialize(A& ar) { ar(seq, target, view); }
};

// State transfer: the joiner asks for `count` parameters from `offset` of the snapshot that
// the source took at the first request of this transfer. After the parameters it may ask for
// the source's extra state (`extra`: offset and count are then bytes of that blob): what the
// application beside the model wants a joiner to start from, never averaged (the Python
// module's optimizer state). `want_extra`: the joiner will ask for it (else the source can drop
// its snapshot after the last parameter chunk).
struct StateRequestMsg {
  std::uint64_t transfer_id = 0;
  std::uint64_t offset = 0, count = 0;
  bool extra = false;
  bool want_extra = false;
  template <class A> void serialize(A& ar) { ar(transfer_id, offset, count, extra, want_extra); }
};
struct StateChunkMsg {
  std::uint64_t transfer_id = 0;
  std::uint64_t offset = 0, total = 0;
  std::uint64_t step = 0;  // the source's clock at its snapshot: the joiner's schedule position
  std::vector<MemberDigest> view;
  std::uint64_t extra_total = 0;  // bytes of extra state in the source's snapshot (0: none)
  bool extra = false;             // this chunk is extra state (offset in bytes), not parameters
  template <class A> void serialize(A& ar) { ar(transfer_id, offset, total, step, view, extra_total, extra); }
};  // payload: float32 values [offset, offset + count), or extra-state bytes

// Graceful leave. With a payload (dense float32), the receiver merges the model (hand-over) and
// answers LeaveAck (a PingMsg with the same seq); without one it is an announcement.
struct LeaveMsg {
  std::uint64_t seq = 0;
  std::uint64_t clock = 0;
  double weight = 1.0;
  std::uint64_t param_count = 0;
  std::vector<MemberDigest> view;  // the leaver first, in state Left
  template <class A> void serialize(A& ar) { ar(seq, clock, weight, param_count, view); }
};

struct ExchangeBusyMsg {
  std::uint64_t exchange_id = 0;
  std::string reason;
  std::vector<MemberDigest> view;
  template <class A> void serialize(A& ar) { ar(exchange_id, reason, view); }
};

Message make_message(const JoinRequestMsg& m);
Message make_message(const JoinReplyMsg& m);
Message make_message(MsgType type, const ExchangeMsg& m, std::shared_ptr<const Bytes> payload);
Message make_message(const ExchangeBusyMsg& m);
Message make_message(MsgType type, const PingMsg& m);  // Ping, Ack or LeaveAck
Message make_message(const PingReqMsg& m);
Message make_message(const StateRequestMsg& m);
Message make_message(const StateChunkMsg& m, std::shared_ptr<const Bytes> payload);
Message make_message(const LeaveMsg& m, std::shared_ptr<const Bytes> payload);
Message make_message(const OverlayMsg& m);

// Throw DecodeError (core/serial.hpp) with the message name on malformed input.
JoinRequestMsg decode_join_request(const Message& m);
JoinReplyMsg decode_join_reply(const Message& m);
ExchangeMsg decode_exchange(const Message& m);
ExchangeBusyMsg decode_busy(const Message& m);
PingMsg decode_ping(const Message& m);
PingReqMsg decode_ping_req(const Message& m);
StateRequestMsg decode_state_request(const Message& m);
StateChunkMsg decode_state_chunk(const Message& m);
LeaveMsg decode_leave(const Message& m);
OverlayMsg decode_overlay(const Message& m);

// Parameters as a payload (codec None) and back.
std::shared_ptr<const Bytes> encode_params(std::span<const float> params);
// Views a codec-None payload as floats; throws DecodeError if the size is not param_count * 4.
std::span<const float> payload_floats(const Message& m, std::uint64_t param_count);
std::span<const float> as_floats(const Bytes& b);

}  // namespace rumor
