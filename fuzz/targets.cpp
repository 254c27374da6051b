// Fuzz target bodies (targets.hpp). Each reads its input as a little program: a few leading
// bytes choose modes and sizes, the rest is the hostile data. Besides "no crash", each checks a
// property and aborts when it breaks: a decoded frame re-encodes to itself, our own handshake
// frames fit the limits the remote enforces, sparse selections are in range and finite, and
// with robust mixing on no input can make a parameter non-finite.
#include "fuzz/targets.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/codec.hpp"
#include "core/env.hpp"
#include "core/gossip.hpp"
#include "core/mix.hpp"
#include "core/protocol_messages.hpp"
#include "core/serial.hpp"
#include "core/sparse.hpp"
#include "net/auth.hpp"
#include "net/frame.hpp"
#include "net/handshake.hpp"

namespace rumor::fuzz {

namespace {

// A property the fuzzer found broken: abort, so libFuzzer saves the input.
[[noreturn]] void broken(const char* what) {
  fmt::print(stderr, "fuzz property broken: {}\n", what);
  std::abort();
}

class Input {
 public:
  Input(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  std::uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(u16() | (std::uint32_t{u16()} << 16)); }
  std::uint64_t u64() { return u32() | (std::uint64_t{u32()} << 32); }
  double f64() {
    const std::uint64_t b = u64();
    double d;
    std::memcpy(&d, &b, sizeof d);
    return d;
  }
  std::span<const std::uint8_t> take(std::size_t k) {
    k = std::min(k, n_);
    std::span<const std::uint8_t> s(p_, k);
    p_ += k;
    n_ -= k;
    return s;
  }
  std::span<const std::uint8_t> rest() { return take(n_); }
  std::string str(std::size_t max) {
    const auto s = take(u8() % (max + 1));
    return std::string(s.begin(), s.end());
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
};

Bytes bytes_of(std::span<const std::uint8_t> s) { return Bytes(s.begin(), s.end()); }

std::shared_ptr<const Bytes> payload_of(std::span<const std::uint8_t> s) {
  if (s.empty()) return nullptr;
  return std::make_shared<const Bytes>(s.begin(), s.end());
}

bool same(const Message& a, const Message& b) {
  return a.type == b.type && a.header == b.header && a.payload_size() == b.payload_size() &&
         (a.payload_size() == 0 || *a.payload == *b.payload);
}

}  // namespace

int frame(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const std::size_t chunk = 1 + in.u8();  // 1..256 bytes per read, as a socket might deliver
  net::FrameDecoder dec(net::FrameLimits{4096, 1u << 16});
  std::vector<Message> out;
  auto rest = in.rest();
  while (!rest.empty()) {
    const auto part = rest.first(std::min(chunk, rest.size()));
    rest = rest.subspan(part.size());
    const auto r = dec.feed(part, out);
    for (const Message& m : out) {
      // A good frame re-encodes to the same message.
      net::FrameDecoder again;
      std::vector<Message> back;
      if (!again.feed(net::encode_frame(m), back).good() || back.size() != 1 || !same(back[0], m))
        broken("a decoded frame does not round-trip");
    }
    out.clear();
    if (r.bad()) {
      if (dec.reason().empty()) broken("a bad frame without a reason");
      break;
    }
  }
  return 0;
}

int handshake(const std::uint8_t* data, std::size_t size) {
  // The record parsers on the whole input.
  const std::span<const std::uint8_t> all(data, size);
  (void)net::record_kind(all);
  try {
    (void)net::decode_challenge(all);
  } catch (const DecodeError&) {
  }
  try {
    (void)net::decode_proof(all);
  } catch (const DecodeError&) {
  }
  try {
    (void)decode_hello(all);
  } catch (const DecodeError&) {
  }

  Input in(data, size);
  const std::uint8_t mode = in.u8();
  const bool keyed = mode & 1;
  const auto role = (mode & 2) ? net::HandshakeRole::Listener : net::HandshakeRole::Dialler;
  const auto theirs = role == net::HandshakeRole::Dialler ? net::HandshakeRole::Listener : net::HandshakeRole::Dialler;
  net::HandshakeConfig cfg;
  cfg.local_id = "127.0.0.1:7000";
  cfg.fingerprint = "logreg:64-10/ce/p650/f32";
  if (keyed) cfg.key = Bytes(32, 0x6b);
  net::Nonce own;
  own.fill(0x11);
  cfg.is_own_nonce = [](const net::Nonce& n) { return n[0] == 0x22 && n[1] == 0x22; };
  net::Handshake hs(role, cfg, own);
  const auto check_sent = [](const std::vector<Message>& frames) {
    for (const Message& f : frames)
      if (f.type != MsgType::Hello || f.header.size() > net::kHandshakeLimits.max_header_bytes || f.payload)
        broken("a handshake frame we send would break the remote's handshake limits");
  };
  check_sent(hs.start());
  net::Nonce peer_nonce{};
  for (int ops = 0; ops < 16 && !in.empty(); ++ops) {
    const std::uint8_t op = in.u8();
    const auto body = in.take(in.u16() % 2048);
    Message m;
    m.type = (op & 0x80) ? static_cast<MsgType>(1 + op % kMaxMsgType) : MsgType::Hello;
    switch (op % 4) {
      case 0: m.header = bytes_of(body); break;  // any record
      case 1: {                                   // a well-formed challenge
        std::memcpy(peer_nonce.data(), body.data(), std::min(body.size(), peer_nonce.size()));
        m.header = net::encode_challenge(peer_nonce);
        break;
      }
      case 2: {  // a valid proof (right key, right nonces) over whatever Hello bytes
        const net::Proof mac = net::auth_proof(cfg.key, theirs, peer_nonce, own, body);
        m.header = net::encode_proof(mac, body);
        break;
      }
      default: {  // a valid proof over a well-formed Hello with fuzzed fields
        Input b(body.data(), body.size());
        Hello h;
        h.version = (b.u8() & 1) ? kProtocolVersion : b.u16();
        h.peer_id = b.str(255);
        h.fingerprint = (b.u8() & 1) ? cfg.fingerprint : b.str(255);
        const Bytes record = encode_hello(h);
        m.header = keyed ? net::encode_proof(net::auth_proof(cfg.key, theirs, peer_nonce, own, record), record) : record;
        break;
      }
    }
    if (op & 0x40) m.payload = std::make_shared<const Bytes>(1, 0);
    const auto step = hs.on_frame(m);
    check_sent(step.send);
    if (step.status == net::Handshake::Status::Failed && step.reason.empty()) broken("a failed handshake without a reason");
    if (step.status == net::Handshake::Status::Done && hs.remote().fingerprint != cfg.fingerprint)
      broken("a handshake done with a different fingerprint");
    if (step.status != net::Handshake::Status::Continue) break;
  }
  return 0;
}

int messages(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  Message m;
  m.type = static_cast<MsgType>(1 + in.u8() % kMaxMsgType);
  m.header = bytes_of(in.take(in.u16()));
  m.payload = payload_of(in.rest());
  try {
    switch (m.type) {
      case MsgType::Hello: (void)decode_hello(m.header); break;
      case MsgType::JoinRequest: (void)decode_join_request(m); break;
      case MsgType::JoinReply: (void)decode_join_reply(m); break;
      case MsgType::ExchangeRequest:
      case MsgType::ExchangeReply: {
        const ExchangeMsg h = decode_exchange(m);
        const auto floats = payload_floats(m, h.param_count);
        if (floats.size() * sizeof(float) != m.payload_size()) broken("payload_floats does not cover the payload");
        break;
      }
      case MsgType::ExchangeBusy: (void)decode_busy(m); break;
      case MsgType::StateRequest: (void)decode_state_request(m); break;
      case MsgType::StateChunk: (void)decode_state_chunk(m); break;
      case MsgType::Leave: (void)decode_leave(m); break;
      case MsgType::PingReq: (void)decode_ping_req(m); break;
      case MsgType::Ping:
      case MsgType::Ack:
      default: (void)decode_ping(m); break;
    }
  } catch (const DecodeError&) {
  }
  return 0;
}

int codecs(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const std::uint8_t sel = in.u8();
  const std::size_t n = in.u32() % (1u << 16);
  const auto bytes = in.rest();
  try {
    switch (sel % 5) {
      case 0:
      case 1: {
        std::vector<float> out(n);
        decode_dense(sel % 5 == 0 ? PayloadCodec::Fp16 : PayloadCodec::Int8, bytes, out);
        break;
      }
      case 4: {  // Q4, the int4 codec's residuals: exact sizes, finite levels and scales only
        std::vector<float> out(n);
        decode_dense(PayloadCodec::Int4, bytes, out);
        if (!all_finite(out)) broken("int4 decoded a non-finite value");
        break;
      }
      case 2: {
        const SparseSelection s = decode_sparse_request(bytes, n);
        if (s.indices.size() != s.values.size() || s.indices.size() > n) broken("sparse request sizes");
        for (std::size_t i = 0; i < s.indices.size(); ++i)
          if (s.indices[i] >= n || (i > 0 && s.indices[i] <= s.indices[i - 1])) broken("sparse indices out of order or range");
        if (!all_finite(s.values)) broken("sparse request values not finite");
        break;
      }
      default: {
        const auto v = decode_sparse_reply(bytes, n);
        if (v.size() != n || !all_finite(v)) broken("sparse reply size or values");
        break;
      }
    }
  } catch (const DecodeError&) {
  }
  return 0;
}

namespace {

class FuzzEnv final : public Env {
 public:
  double now() const override { return t; }
  void send(const PeerId&, Message) override {}
  void set_timer(double, std::uint64_t id) override {
    if (timers.size() < 256) timers.push_back(id);
  }
  void disconnect(const PeerId&) override {}
  Rng& rng() override { return r; }
  void event(const ProtocolEvent&) override {}
  double t = 0;
  Rng r{1};
  std::vector<std::uint64_t> timers;
};

constexpr std::size_t kFuzzParams = 16;

std::vector<MemberDigest> fuzz_view(Input& in) {
  std::vector<MemberDigest> v(in.u8() % 4);
  for (auto& d : v) {
    d.id = "127.0.0.1:" + std::to_string(2 + in.u8() % 8);
    d.incarnation = in.u8();
    d.state = static_cast<MemberState>(in.u8() % 4);
    d.clock = in.u16();
  }
  return v;
}

// A message that passes the header decoders, so the handlers' own checks get exercised.
Message structured_message(Input& in, PayloadCodec codec, std::uint32_t fragments) {
  const std::uint8_t kind = in.u8();
  switch (kind % 6) {
    case 5: {  // state transfer: requests and chunks, of the model or of the extra state
      if (in.u8() & 1) return make_message(StateRequestMsg{in.u8() % 4u, in.u8(), in.u8(), (in.u8() & 1) != 0, (in.u8() & 1) != 0});
      StateChunkMsg c{in.u8() % 4u, in.u8(), (in.u8() & 3) ? kFuzzParams : in.u8(), in.u16(), fuzz_view(in), in.u8(),
                      (in.u8() & 1) != 0};
      return make_message(c, payload_of(in.take(in.u16() % 512)));
    }
    case 0:
    case 1: {
      ExchangeMsg h;
      h.exchange_id = in.u8() % 4;
      h.clock = in.u16();
      h.weight = (in.u8() & 1) ? 1.0 : in.f64();
      h.codec = (in.u8() & 3) ? codec : static_cast<PayloadCodec>(in.u8() % 6);
      h.param_count = (in.u8() & 3) ? kFuzzParams : in.u8();
      h.view = fuzz_view(in);
      if ((in.u8() & 7) == 0) {  // a chunk of a snapshot sent in several messages (version 5)
        h.offset = in.u32();
        h.chunk = in.u32();
      }
      // Version 8: fragments (mostly ours, sometimes another count or out of range) and int4.
      const std::uint8_t v8 = in.u8();
      h.fragments = (v8 & 3) ? fragments : v8 % 7;
      h.fragment = (v8 & 3) ? (v8 >> 2) % fragments : (v8 >> 3) % 7;
      h.absolute = (v8 & 0x40) != 0;
      h.ref_hash = (v8 & 0x80) ? in.u64() : 0;
      std::shared_ptr<const Bytes> payload;
      if (h.codec == PayloadCodec::Int4 && (v8 & 0x20) && h.fragments > 0 && h.fragment < h.fragments) {
        // The size an int4 payload of this range must have, with wild contents.
        auto p = std::make_shared<Bytes>(encoded_size(h.absolute ? PayloadCodec::Int8 : PayloadCodec::Int4, h.range_len()));
        for (auto& b : *p) b = in.u8();
        payload = p;
      } else if (in.u8() & 1) {
        // Dense floats, some of them wild.
        auto p = std::make_shared<Bytes>(kFuzzParams * sizeof(float));
        for (std::size_t i = 0; i < kFuzzParams; ++i) {
          float f = 0.5f;
          switch (in.u8() % 4) {
            case 0: f = static_cast<float>(static_cast<std::int8_t>(in.u8())) / 16; break;
            case 1: {
              const std::uint32_t b = in.u32();
              std::memcpy(&f, &b, sizeof f);
              break;
            }
            case 2: f = 1e30f; break;
            default: break;
          }
          std::memcpy(p->data() + i * sizeof(float), &f, sizeof f);
        }
        payload = p;
      } else {
        payload = payload_of(in.take(in.u16() % 512));
      }
      // Requests with or without a payload (one-shot or streamed), replies, streamed payloads
      // and accepts.
      static constexpr MsgType kLater[] = {MsgType::ExchangeReply, MsgType::ExchangePayload, MsgType::ExchangeAccept};
      if (kind % 5 == 0 && (kind & 0x80)) payload = nullptr;
      return make_message(kind % 5 == 0 ? MsgType::ExchangeRequest : kLater[(kind / 5) % 3], h, payload);
    }
    case 2: {
      ExchangeBusyMsg b;
      b.exchange_id = in.u8() % 4;
      b.reason = (in.u8() & 1) ? "stale: x" : "busy";
      b.view = fuzz_view(in);
      return make_message(b);
    }
    case 3: {
      JoinReplyMsg r;
      r.members = fuzz_view(in);
      return make_message(r);
    }
    default: {
      PingMsg p;
      p.seq = in.u8();
      p.view = fuzz_view(in);
      return make_message((in.u8() & 1) ? MsgType::Ping : MsgType::Ack, p);
    }
  }
}

}  // namespace

int gossip(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const std::uint8_t mode = in.u8();
  GossipConfig cfg;
  cfg.codec = static_cast<PayloadCodec>(mode % 4);
  if (mode & 128) {  // version 8: int4 in topk's place, or fragments with the other codecs
    if (cfg.codec == PayloadCodec::TopK) cfg.codec = PayloadCodec::Int4;
    else cfg.fragments = 3;
  }
  cfg.robust.enabled = mode & 4;
  cfg.staleness = (mode & 8) ? 2.0 : INFINITY;
  cfg.topk_fraction = 0.25;
  cfg.fetch_extra_state = mode & 32;
  cfg.state_chunk_floats = 4;  // several chunks, of the model and of the extra state
  std::vector<float> params(kFuzzParams);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
  FuzzEnv env;
  Gossip g(env, cfg, MemberDigest{"127.0.0.1:1", 1, MemberState::Alive, 0}, "fp", params);
  if (mode & 64) g.set_extra_state(std::make_shared<const Bytes>(40, std::uint8_t{7}));
  g.start((mode & 16) ? std::vector<PeerId>{"127.0.0.1:2"} : std::vector<PeerId>{});
  std::uint64_t clock = 0;
  for (int ops = 0; ops < 64 && !in.empty(); ++ops) {
    const std::uint8_t op = in.u8();
    env.t += 0.01 * (op & 7);
    const PeerId from = "127.0.0.1:" + std::to_string(2 + ((op >> 3) & 7));
    switch (op >> 6) {
      case 0: {  // raw bytes as a message of any type
        Message m;
        m.type = static_cast<MsgType>(1 + in.u8() % kMaxMsgType);
        m.header = bytes_of(in.take(in.u16() % 1024));
        m.payload = payload_of(in.take(in.u16() % 512));
        g.on_message(from, m);
        break;
      }
      case 1: g.on_message(from, structured_message(in, cfg.codec, g.fragments())); break;
      case 2:
        ++clock;
        g.on_step_done(clock, clock * 10);
        break;
      default:
        if (!env.timers.empty() && (op & 1)) {
          const std::size_t i = in.u8() % env.timers.size();
          const std::uint64_t id = env.timers[i];
          env.timers.erase(env.timers.begin() + static_cast<std::ptrdiff_t>(i));
          g.on_timer(id);
        } else if (op & 2) {
          g.on_send_failed(from, "connection refused");
        } else {
          g.on_idle();
        }
        break;
    }
    // Non-finite parameters are always refused, and robust mixing keeps the rest in range, so
    // with it on no input may make our model non-finite. (Without it, finite but huge values
    // can overflow in the mixing arithmetic: that is what --robust is for.)
    if (cfg.robust.enabled && !all_finite(params)) broken("robust mixing let a non-finite parameter in");
  }
  return 0;
}

}  // namespace rumor::fuzz
