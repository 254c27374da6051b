// The handshake state machine (handshake.hpp has the protocol, docs/wire.md the bytes).
#include "net/handshake.hpp"

#include <algorithm>
#include <cstring>

#include "core/serial.hpp"

namespace rumor::net {

namespace {

bool has_tag(std::span<const std::uint8_t> r, const std::uint8_t (&tag)[4]) {
  return r.size() >= 4 && std::memcmp(r.data(), tag, 4) == 0;
}

Message handshake_frame(Bytes record) {
  Message m;
  m.type = MsgType::Hello;
  m.header = std::move(record);
  return m;
}

}  // namespace

// (resize + memcpy rather than inserts: GCC 12 warns falsely, -Warray-bounds, on the inserts.)
Bytes encode_challenge(const Nonce& nonce) {
  Bytes b(kChallengeRecordSize);
  std::memcpy(b.data(), kChallengeTag, 4);
  b[4] = kAuthSchemeHmacSha256;
  std::memcpy(b.data() + 5, nonce.data(), nonce.size());
  return b;
}

Bytes encode_proof(const Proof& mac, std::span<const std::uint8_t> hello_record) {
  Bytes b(4 + mac.size() + hello_record.size());
  std::memcpy(b.data(), kProofTag, 4);
  std::memcpy(b.data() + 4, mac.data(), mac.size());
  if (!hello_record.empty()) std::memcpy(b.data() + 4 + mac.size(), hello_record.data(), hello_record.size());
  return b;
}

Nonce decode_challenge(std::span<const std::uint8_t> record) {
  if (!has_tag(record, kChallengeTag)) throw DecodeError("malformed AuthChallenge: bad tag");
  if (record.size() != kChallengeRecordSize)
    throw DecodeError("malformed AuthChallenge: " + std::to_string(record.size()) + " bytes, expected " +
                      std::to_string(kChallengeRecordSize));
  if (record[4] != kAuthSchemeHmacSha256)
    throw DecodeError("AuthChallenge asks for authentication scheme " + std::to_string(record[4]) +
                      ", we speak " + std::to_string(kAuthSchemeHmacSha256) + " (HMAC-SHA256)");
  Nonce n{};
  std::memcpy(n.data(), record.data() + 5, n.size());
  return n;
}

ProofRecord decode_proof(std::span<const std::uint8_t> record) {
  if (!has_tag(record, kProofTag)) throw DecodeError("malformed AuthProof: bad tag");
  if (record.size() < 4 + kProofSize + 1) throw DecodeError("malformed AuthProof: too short");
  ProofRecord p;
  std::memcpy(p.mac.data(), record.data() + 4, kProofSize);
  p.hello = record.subspan(4 + kProofSize);
  return p;
}

RecordKind record_kind(std::span<const std::uint8_t> record) {
  if (has_tag(record, kChallengeTag)) return RecordKind::Challenge;
  if (has_tag(record, kProofTag)) return RecordKind::Proof;
  return RecordKind::Hello;
}

const char* record_kind_name(RecordKind k) {
  switch (k) {
    case RecordKind::Hello: return "Hello";
    case RecordKind::Challenge: return "AuthChallenge";
    case RecordKind::Proof: return "AuthProof";
  }
  return "?";
}

Handshake::Handshake(HandshakeRole role, HandshakeConfig cfg, const Nonce& nonce)
    : role_(role), cfg_(std::move(cfg)), nonce_(nonce) {
  Hello h;
  h.peer_id = cfg_.local_id;
  h.fingerprint = cfg_.fingerprint;
  hello_record_ = encode_hello(h);
}

std::vector<Message> Handshake::start() {
  std::vector<Message> out;
  if (state_ != State::Idle) return out;
  if (keyed()) {
    state_ = State::AwaitChallenge;
    out.push_back(handshake_frame(encode_challenge(nonce_)));
  } else {
    state_ = State::AwaitHello;
    out.push_back(handshake_frame(hello_record_));
  }
  return out;
}

Handshake::Step Handshake::fail(std::string reason) {
  state_ = State::Failed;
  Step s;
  s.status = Status::Failed;
  s.reason = std::move(reason);
  return s;
}

Handshake::Step Handshake::on_frame(const Message& m) {
  switch (state_) {
    case State::Idle: return fail("handshake frame before the handshake started");
    case State::Done: return fail("unexpected second Hello");
    case State::Failed: return fail("handshake already failed");
    default: break;
  }
  if (m.type != MsgType::Hello) {
    if (state_ == State::AwaitHello) return fail(std::string("expected Hello as the first frame, got ") + msg_type_name(m.type));
    return fail(std::string("expected ") + (state_ == State::AwaitChallenge ? "AuthChallenge" : "AuthProof") +
                " (this swarm requires the swarm key), got " + msg_type_name(m.type));
  }
  if (m.payload_size() != 0) return fail("handshake frame with a payload");
  const RecordKind kind = record_kind(m.header);
  switch (state_) {
    case State::AwaitHello:
      if (kind != RecordKind::Hello)
        return fail(std::string("the remote requires a swarm key (it sent an ") + record_kind_name(kind) +
                    "); this peer has none (--swarm-key)");
      return on_open_hello(m);
    case State::AwaitChallenge:
      if (kind == RecordKind::Hello)
        return fail("the remote sent a plain Hello: it has no swarm key, and this swarm requires one (--swarm-key)");
      if (kind != RecordKind::Challenge) return fail(std::string("expected AuthChallenge, got ") + record_kind_name(kind));
      return on_challenge(m.header);
    case State::AwaitProof:
      if (kind != RecordKind::Proof) return fail(std::string("expected AuthProof, got ") + record_kind_name(kind));
      return on_proof(m.header);
    default: break;
  }
  return fail("handshake in a bad state");
}

std::string Handshake::check_hello(const Hello& h) const {
  if (h.version != kProtocolVersion)
    return "Hello says protocol version " + std::to_string(h.version) + ", we speak " + std::to_string(kProtocolVersion);
  if (h.fingerprint != cfg_.fingerprint)
    return "model fingerprint mismatch: ours '" + cfg_.fingerprint + "', theirs '" + h.fingerprint + "'";
  return {};
}

Handshake::Step Handshake::on_open_hello(const Message& m) {
  Hello h;
  try {
    h = decode_hello(m.header);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  remote_id_ = h.peer_id;  // named in the rejections below
  if (auto why = check_hello(h); !why.empty()) return fail(std::move(why));
  remote_ = std::move(h);
  state_ = State::Done;
  Step s;
  s.status = Status::Done;
  return s;
}

Handshake::Step Handshake::on_challenge(std::span<const std::uint8_t> record) {
  try {
    peer_nonce_ = decode_challenge(record);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  if (peer_nonce_ == nonce_ || (cfg_.is_own_nonce && cfg_.is_own_nonce(peer_nonce_)))
    return fail("authentication failed: the remote echoed a nonce we issued (a reflected handshake?)");
  state_ = State::AwaitProof;
  Step s;
  // The dialler proves first; the listener proves only to a remote that has proven itself.
  if (role_ == HandshakeRole::Dialler) s.send.push_back(own_proof());
  return s;
}

Message Handshake::own_proof() const {
  const Proof mac = auth_proof(cfg_.key, role_, nonce_, peer_nonce_, hello_record_);
  return handshake_frame(encode_proof(mac, hello_record_));
}

Handshake::Step Handshake::on_proof(std::span<const std::uint8_t> record) {
  ProofRecord p;
  try {
    p = decode_proof(record);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  const HandshakeRole theirs = role_ == HandshakeRole::Dialler ? HandshakeRole::Listener : HandshakeRole::Dialler;
  const Proof want = auth_proof(cfg_.key, theirs, peer_nonce_, nonce_, p.hello);
  if (!proofs_equal(want, p.mac))
    return fail("authentication failed: the remote's proof does not match our swarm key "
                "(a different --swarm-key, or a replayed handshake)");
  Hello h;
  try {
    h = decode_hello(p.hello);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  if (h.peer_id == cfg_.local_id)
    return fail("authentication failed: the remote claims our own peer id " + h.peer_id + " (a reflected handshake?)");
  remote_id_ = h.peer_id;  // authenticated: a member of the swarm
  if (auto why = check_hello(h); !why.empty()) return fail(std::move(why));
  remote_ = std::move(h);
  state_ = State::Done;
  Step s;
  s.status = Status::Done;
  if (role_ == HandshakeRole::Listener) s.send.push_back(own_proof());
  return s;
}

}  // namespace rumor::net
