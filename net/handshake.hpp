// The connection handshake as a pure state machine: what a side sends first, how it answers
// each frame the remote sends, when the remote counts as checked, and how large the remote's
// next frame may be. No sockets, clocks or threads: net/transport.cpp drives one per connection
// (and owns the deadline), the unit tests and the fuzzer drive it directly. docs/wire.md has
// the bytes, docs/security.md the reasoning.
//
// Every handshake record travels in a frame of type Hello (1), so the frame layer and the
// message types are the same whether or not the swarm has a key; the record's first bytes say
// what it is (a Hello record is Cereal binary of rumor::Hello and starts with its version).
//
// Open swarm (no key): both sides send a Hello at once; the first frame received must be a good
// Hello with our protocol version and exactly our model fingerprint.
//
// With a swarm key (mutual HMAC-SHA256 challenge-response over fresh nonces), numbered:
//  1. Both sides send AuthChallenge{scheme 1, a fresh 32-byte nonce} at once.
//  2. The dialler, on the listener's challenge, sends AuthProof{mac, Hello_D} with
//     mac = HMAC(key, "rumor-auth-v1" || dialler || n_D || n_L || Hello_D).
//  3. The listener checks that mac (constant time) and only then the Hello inside it; if both
//     are good it sends its own AuthProof{HMAC(key, ... || listener || n_L || n_D || Hello_L),
//     Hello_L} and the connection is open. A remote without the key has been shown one random
//     nonce and nothing else: no peer id, no fingerprint, no parameters.
//  4. The dialler checks the listener's proof and Hello the same way: open.
// A recorded handshake replayed later fails at 3: the listener's nonce is fresh, so the old mac
// does not match. A proof cannot be reflected back either: the role is inside the mac, a remote
// nonce equal to one we issued is refused, and so is a remote that claims our own peer id.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/message.hpp"
#include "net/auth.hpp"
#include "net/frame.hpp"

namespace rumor::net {

// Record tags: the first 4 bytes of a handshake record that is not a Hello.
constexpr std::uint8_t kChallengeTag[4] = {'R', 'M', 'C', 'H'};
constexpr std::uint8_t kProofTag[4] = {'R', 'M', 'P', 'R'};
constexpr std::uint8_t kAuthSchemeHmacSha256 = 1;
constexpr std::size_t kChallengeRecordSize = 4 + 1 + kNonceSize;  // tag, scheme, nonce

// Frame limits while the remote is a stranger: one small record per frame and no payload (a
// Hello is at most 255 + 1024 bytes of strings plus prefixes, a proof adds 36, a challenge is
// 37). Large enough to read a keyless peer's plain Hello and say what is wrong.
constexpr FrameLimits kHandshakeLimits{4096, 0};

Bytes encode_challenge(const Nonce& nonce);
Bytes encode_proof(const Proof& mac, std::span<const std::uint8_t> hello_record);
// Parsers for the records above: throw DecodeError (core/serial.hpp) with the reason.
Nonce decode_challenge(std::span<const std::uint8_t> record);
struct ProofRecord {
  Proof mac{};
  std::span<const std::uint8_t> hello;  // points into the parsed record
};
ProofRecord decode_proof(std::span<const std::uint8_t> record);
// What a handshake record is, from its first bytes.
enum class RecordKind { Hello, Challenge, Proof };
RecordKind record_kind(std::span<const std::uint8_t> record);
const char* record_kind_name(RecordKind k);

struct HandshakeConfig {
  PeerId local_id;          // our Hello's peer id (the address we listen on)
  std::string fingerprint;  // our model fingerprint; the remote's must match exactly
  Bytes key;                // the swarm key; empty: an open swarm
  // Reflection guard (optional): true if `n` is a nonce this process issued itself.
  std::function<bool(const Nonce&)> is_own_nonce;
};

class Handshake {
 public:
  enum class Status { Continue, Done, Failed };
  struct Step {
    Status status = Status::Continue;
    std::vector<Message> send;  // frames to send now, in order
    std::string reason;         // when Failed
  };

  // `nonce` must be fresh (random_nonce()); tests and the fuzzer pass fixed ones.
  Handshake(HandshakeRole role, HandshakeConfig cfg, const Nonce& nonce);

  // The frames to send as soon as the connection is up (a Hello, or an AuthChallenge).
  std::vector<Message> start();
  // One frame from the remote, in order. After Done or Failed, every frame fails.
  Step on_frame(const Message& m);

  // Limits for the remote's next frame header and payload (until done()).
  FrameLimits limits() const { return kHandshakeLimits; }
  bool keyed() const { return !cfg_.key.empty(); }
  bool done() const { return state_ == State::Done; }
  HandshakeRole role() const { return role_; }
  const Nonce& nonce() const { return nonce_; }
  // The remote's checked Hello (valid once done()).
  const Hello& remote() const { return remote_; }
  // The remote's peer id as soon as it may be used to name it in a log line: in an open swarm
  // once its Hello parsed, with a key once its proof verified. Empty until then.
  const PeerId& remote_id() const { return remote_id_; }

 private:
  enum class State { Idle, AwaitHello, AwaitChallenge, AwaitProof, Done, Failed };
  Step fail(std::string reason);
  Step on_open_hello(const Message& m);
  Step on_challenge(std::span<const std::uint8_t> record);
  Step on_proof(std::span<const std::uint8_t> record);
  // Checks a decoded Hello: version and fingerprint. Empty when good.
  std::string check_hello(const Hello& h) const;
  Message own_proof() const;

  HandshakeRole role_;
  HandshakeConfig cfg_;
  Nonce nonce_;
  Nonce peer_nonce_{};
  Bytes hello_record_;  // our Hello, encoded once
  State state_ = State::Idle;
  Hello remote_;
  PeerId remote_id_;
};

}  // namespace rumor::net
