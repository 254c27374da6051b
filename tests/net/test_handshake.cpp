// The handshake state machine on its own (net/handshake.hpp): two Handshake objects wired back
// to back, with fixed nonces, and hostile remotes played by hand. No sockets.
#include <doctest/doctest.h>

#include <cstring>

#include "core/serial.hpp"
#include "net/auth.hpp"
#include "net/handshake.hpp"

using namespace rumor;
using namespace rumor::net;

namespace {

const std::string kFp = "mlp:784-256-128-10/ce/p235146/f32";

Bytes key_of(const std::string& s) { return Bytes(s.begin(), s.end()); }
const Bytes kKey = key_of("0123456789abcdef-the-swarm-key!!");

Nonce nonce_of(std::uint8_t b) {
  Nonce n;
  n.fill(b);
  return n;
}

HandshakeConfig config(const PeerId& id, Bytes key = {}, const std::string& fp = kFp) {
  HandshakeConfig c;
  c.local_id = id;
  c.fingerprint = fp;
  c.key = std::move(key);
  return c;
}

// Runs two handshakes against each other until both stop; returns what each one sent.
struct Wire {
  std::vector<Message> d_sent, l_sent;
  Handshake::Status d_status = Handshake::Status::Continue, l_status = Handshake::Status::Continue;
  std::string d_reason, l_reason;
};

Wire run(Handshake& d, Handshake& l) {
  Wire w;
  std::vector<Message> to_l = d.start(), to_d = l.start();
  w.d_sent = to_l;
  w.l_sent = to_d;
  for (int round = 0; round < 8 && (!to_l.empty() || !to_d.empty()); ++round) {
    std::vector<Message> next_l, next_d;
    for (const auto& m : to_l) {
      if (w.l_status != Handshake::Status::Continue) break;
      auto s = l.on_frame(m);
      w.l_status = s.status;
      w.l_reason = s.reason;
      for (auto& x : s.send) {
        w.l_sent.push_back(x);
        next_d.push_back(x);
      }
    }
    for (const auto& m : to_d) {
      if (w.d_status != Handshake::Status::Continue) break;
      auto s = d.on_frame(m);
      w.d_status = s.status;
      w.d_reason = s.reason;
      for (auto& x : s.send) {
        w.d_sent.push_back(x);
        next_l.push_back(x);
      }
    }
    to_l = std::move(next_l);
    to_d = std::move(next_d);
  }
  return w;
}

bool mentions(const std::vector<Message>& frames, const std::string& s) {
  for (const auto& m : frames) {
    const std::string h(m.header.begin(), m.header.end());
    if (h.find(s) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("handshake: open swarm, a Hello each way") {
  Handshake d(HandshakeRole::Dialler, config("127.0.0.1:1000"), nonce_of(1));
  Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000"), nonce_of(2));
  const Wire w = run(d, l);
  CHECK(w.d_status == Handshake::Status::Done);
  CHECK(w.l_status == Handshake::Status::Done);
  CHECK(d.remote_id() == "127.0.0.1:2000");
  CHECK(l.remote_id() == "127.0.0.1:1000");
  CHECK(d.remote().fingerprint == kFp);
  REQUIRE(w.d_sent.size() == 1);
  CHECK(record_kind(w.d_sent[0].header) == RecordKind::Hello);
  CHECK(l.limits().max_header_bytes == kHandshakeLimits.max_header_bytes);
}

TEST_CASE("handshake: with the same key both sides prove it and learn each other's Hello") {
  Handshake d(HandshakeRole::Dialler, config("127.0.0.1:1000", kKey), nonce_of(1));
  Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
  CHECK(d.limits().max_header_bytes == kHandshakeLimits.max_header_bytes);
  const Wire w = run(d, l);
  CHECK(w.d_status == Handshake::Status::Done);
  CHECK(w.l_status == Handshake::Status::Done);
  CHECK(d.remote_id() == "127.0.0.1:2000");
  CHECK(l.remote_id() == "127.0.0.1:1000");
  // Each side: a challenge, then a proof carrying its Hello.
  REQUIRE(w.d_sent.size() == 2);
  REQUIRE(w.l_sent.size() == 2);
  CHECK(record_kind(w.l_sent[0].header) == RecordKind::Challenge);
  CHECK(w.l_sent[0].header.size() == kChallengeRecordSize);
  CHECK(record_kind(w.l_sent[1].header) == RecordKind::Proof);
  CHECK(decode_hello(decode_proof(w.l_sent[1].header).hello).peer_id == "127.0.0.1:2000");
  for (const auto& m : w.d_sent) CHECK(m.type == MsgType::Hello);
}

TEST_CASE("handshake: a remote without the key, or with another key, learns one nonce and nothing else") {
  SUBCASE("no key: it sends a plain Hello") {
    Handshake d(HandshakeRole::Dialler, config("127.0.0.1:1000"), nonce_of(1));
    Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
    const Wire w = run(d, l);
    CHECK(w.l_status == Handshake::Status::Failed);
    CHECK(w.l_reason.find("no swarm key") != std::string::npos);
    CHECK(w.d_status == Handshake::Status::Failed);
    CHECK(w.d_reason.find("requires a swarm key") != std::string::npos);
    REQUIRE(w.l_sent.size() == 1);  // the challenge
    CHECK(record_kind(w.l_sent[0].header) == RecordKind::Challenge);
    CHECK(l.remote_id().empty());
  }
  SUBCASE("another key") {
    Handshake d(HandshakeRole::Dialler, config("127.0.0.1:1000", key_of("a-different-key-of-32-bytes.....")), nonce_of(1));
    Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
    const Wire w = run(d, l);
    CHECK(w.l_status == Handshake::Status::Failed);
    CHECK(w.l_reason.find("does not match our swarm key") != std::string::npos);
    CHECK(w.d_status == Handshake::Status::Continue);  // it waits for a proof that never comes
    REQUIRE(w.l_sent.size() == 1);
    CHECK(!mentions(w.l_sent, "127.0.0.1:2000"));  // not our id,
    CHECK(!mentions(w.l_sent, "mlp"));             // not our fingerprint
    CHECK(l.remote_id().empty());                  // and its claimed id is not believed
  }
}

TEST_CASE("handshake: a recorded dialler handshake replayed to a fresh listener fails") {
  Handshake d(HandshakeRole::Dialler, config("127.0.0.1:1000", kKey), nonce_of(1));
  Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
  const Wire w = run(d, l);
  REQUIRE(w.l_status == Handshake::Status::Done);
  // Later: the attacker replays the dialler's frames to the same listener, which has a new nonce.
  Handshake l2(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(3));
  l2.start();
  Handshake::Step s;
  for (const auto& m : w.d_sent) {
    s = l2.on_frame(m);
    if (s.status != Handshake::Status::Continue) break;
  }
  CHECK(s.status == Handshake::Status::Failed);
  CHECK(s.reason.find("replayed") != std::string::npos);
  CHECK(s.send.empty());
}

TEST_CASE("handshake: reflection attempts are refused") {
  SUBCASE("our own nonce echoed back") {
    Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
    l.start();
    Message m{MsgType::Hello, encode_challenge(nonce_of(2)), nullptr};
    const auto s = l.on_frame(m);
    CHECK(s.status == Handshake::Status::Failed);
    CHECK(s.reason.find("nonce we issued") != std::string::npos);
  }
  SUBCASE("a nonce another of our connections issued") {
    HandshakeConfig c = config("127.0.0.1:2000", kKey);
    c.is_own_nonce = [](const Nonce& n) { return n == nonce_of(9); };
    Handshake l(HandshakeRole::Listener, c, nonce_of(2));
    l.start();
    const auto s = l.on_frame({MsgType::Hello, encode_challenge(nonce_of(9)), nullptr});
    CHECK(s.status == Handshake::Status::Failed);
  }
  SUBCASE("a valid proof from a remote claiming our own id") {
    // The attacker got a real dialler proof made by us (id 127.0.0.1:2000) for these nonces.
    Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
    l.start();
    REQUIRE(l.on_frame({MsgType::Hello, encode_challenge(nonce_of(1)), nullptr}).status == Handshake::Status::Continue);
    Hello me;
    me.peer_id = "127.0.0.1:2000";
    me.fingerprint = kFp;
    const Bytes hello = encode_hello(me);
    const Proof mac = auth_proof(kKey, HandshakeRole::Dialler, nonce_of(1), nonce_of(2), hello);
    const auto s = l.on_frame({MsgType::Hello, encode_proof(mac, hello), nullptr});
    CHECK(s.status == Handshake::Status::Failed);
    CHECK(s.reason.find("our own peer id") != std::string::npos);
  }
  SUBCASE("a listener proof presented as a dialler's") {
    Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
    l.start();
    REQUIRE(l.on_frame({MsgType::Hello, encode_challenge(nonce_of(1)), nullptr}).status == Handshake::Status::Continue);
    Hello h;
    h.peer_id = "127.0.0.1:1000";
    h.fingerprint = kFp;
    const Bytes hello = encode_hello(h);
    const Proof mac = auth_proof(kKey, HandshakeRole::Listener, nonce_of(1), nonce_of(2), hello);
    CHECK(l.on_frame({MsgType::Hello, encode_proof(mac, hello), nullptr}).status == Handshake::Status::Failed);
  }
}

TEST_CASE("handshake: after authentication the usual Hello checks still apply") {
  Handshake d(HandshakeRole::Dialler, config("127.0.0.1:1000", kKey, "logreg/p650/f32"), nonce_of(1));
  Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
  const Wire w = run(d, l);
  CHECK(w.l_status == Handshake::Status::Failed);
  CHECK(w.l_reason.find("model fingerprint mismatch") != std::string::npos);
  CHECK(l.remote_id() == "127.0.0.1:1000");  // authenticated, so named
}

TEST_CASE("handshake: malformed records and wrong frames are refused with a reason") {
  const auto first_frame_fails = [](bool keyed, Message m, const std::string& want) {
    Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", keyed ? kKey : Bytes{}), nonce_of(2));
    l.start();
    const auto s = l.on_frame(m);
    INFO("reason: " << s.reason);
    CHECK(s.status == Handshake::Status::Failed);
    CHECK(s.reason.find(want) != std::string::npos);
    // And it stays failed.
    CHECK(l.on_frame(m).status == Handshake::Status::Failed);
  };
  first_frame_fails(false, {MsgType::ExchangeRequest, {1, 2}, nullptr}, "expected Hello as the first frame, got ExchangeRequest");
  first_frame_fails(true, {MsgType::Ping, {}, nullptr}, "expected AuthChallenge");
  first_frame_fails(false, {MsgType::Hello, {1, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}, nullptr},
                    "malformed Hello");
  Bytes short_challenge = encode_challenge(nonce_of(5));
  short_challenge.pop_back();
  first_frame_fails(true, {MsgType::Hello, short_challenge, nullptr}, "malformed AuthChallenge");
  Bytes other_scheme = encode_challenge(nonce_of(5));
  other_scheme[4] = 7;
  first_frame_fails(true, {MsgType::Hello, other_scheme, nullptr}, "scheme 7");
  first_frame_fails(true, {MsgType::Hello, encode_proof(Proof{}, {}), nullptr}, "expected AuthChallenge, got AuthProof");
  auto payload = std::make_shared<const Bytes>(Bytes{1});
  first_frame_fails(true, {MsgType::Hello, encode_challenge(nonce_of(5)), payload}, "payload");
  // A proof too short to hold a Hello.
  Handshake l(HandshakeRole::Listener, config("127.0.0.1:2000", kKey), nonce_of(2));
  l.start();
  REQUIRE(l.on_frame({MsgType::Hello, encode_challenge(nonce_of(1)), nullptr}).status == Handshake::Status::Continue);
  const Bytes cut(kProofTag, kProofTag + 4);
  const auto s = l.on_frame({MsgType::Hello, cut, nullptr});
  CHECK(s.status == Handshake::Status::Failed);
  CHECK(s.reason.find("too short") != std::string::npos);
}

TEST_CASE("auth: the proof is HMAC-SHA256 over exactly the bytes docs/wire.md lists") {
  // Computed independently: python3 -c "import hmac,hashlib; print(hmac.new(b'k'*32,
  //   b'rumor-auth-v1' + b'\x01' + b'\x11'*32 + b'\x22'*32 + b'hello', hashlib.sha256).hexdigest())"
  const std::string hello = "hello";
  const Proof p = auth_proof(Bytes(32, 'k'), HandshakeRole::Dialler, nonce_of(0x11), nonce_of(0x22),
                             Bytes(hello.begin(), hello.end()));
  std::string hex;
  for (std::uint8_t b : p) {
    static const char* digits = "0123456789abcdef";
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  CHECK(hex == "26e324735b62a614fdd56b0e379d6daf1b273297240819f55d394ea15640f014");
}

TEST_CASE("auth: the proof depends on every input, and comparison is exact") {
  const Bytes hello = {1, 2, 3};
  const Proof p = auth_proof(kKey, HandshakeRole::Dialler, nonce_of(1), nonce_of(2), hello);
  CHECK(proofs_equal(p, auth_proof(kKey, HandshakeRole::Dialler, nonce_of(1), nonce_of(2), hello)));
  CHECK(!proofs_equal(p, auth_proof(key_of("another key, also long enough"), HandshakeRole::Dialler, nonce_of(1), nonce_of(2), hello)));
  CHECK(!proofs_equal(p, auth_proof(kKey, HandshakeRole::Listener, nonce_of(1), nonce_of(2), hello)));
  CHECK(!proofs_equal(p, auth_proof(kKey, HandshakeRole::Dialler, nonce_of(2), nonce_of(1), hello)));
  CHECK(!proofs_equal(p, auth_proof(kKey, HandshakeRole::Dialler, nonce_of(1), nonce_of(2), Bytes{1, 2, 4})));
  // Fresh nonces differ (with overwhelming probability).
  CHECK(random_nonce() != random_nonce());
}
