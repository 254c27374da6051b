// fuzz_make_seeds DIR: writes the seed corpus, DIR/<target>/<name>, one small valid input per
// case each target understands (targets.cpp reads them as little programs). The named files
// of fuzz/corpus/ were made with it (the hash-named ones are inputs libFuzzer found, merged in
// with -merge=1); rerun it when a format changes:
//   build-fuzz/fuzz/fuzz_make_seeds fuzz/corpus
#include <fmt/core.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/codec.hpp"
#include "core/protocol_messages.hpp"
#include "core/sparse.hpp"
#include "net/auth.hpp"
#include "net/frame.hpp"
#include "net/handshake.hpp"

using namespace rumor;
namespace fs = std::filesystem;

namespace {

fs::path root;

void write(const std::string& target, const std::string& name, const Bytes& b) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()),
                                                                static_cast<std::streamsize>(b.size()));
}

void put16(Bytes& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v));
  b.push_back(static_cast<std::uint8_t>(v >> 8));
}
void put32(Bytes& b, std::uint32_t v) {
  put16(b, static_cast<std::uint16_t>(v));
  put16(b, static_cast<std::uint16_t>(v >> 16));
}
void append(Bytes& b, const Bytes& more) { b.insert(b.end(), more.begin(), more.end()); }

std::vector<MemberDigest> view() {
  return {MemberDigest{"127.0.0.1:7001", 3, MemberState::Alive, 12}, MemberDigest{"127.0.0.1:7002", 1, MemberState::Suspect, 9}};
}

std::vector<std::pair<std::string, Message>> sample_messages() {
  const std::vector<float> params = {0.5f, -1.25f, 3.0f, 0.0f};
  ExchangeMsg x{7, 12, 1.0, PayloadCodec::None, params.size(), view()};
  Hello h;
  h.peer_id = "127.0.0.1:7000";
  h.fingerprint = "logreg:64-10/ce/p650/f32";
  std::vector<std::pair<std::string, Message>> out;
  out.push_back({"hello", Message{MsgType::Hello, encode_hello(h), nullptr}});
  out.push_back({"join_request", make_message(JoinRequestMsg{view()[0], h.fingerprint})});
  out.push_back({"join_reply", make_message(JoinReplyMsg{view()})});
  out.push_back({"exchange_request", make_message(MsgType::ExchangeRequest, x, encode_params(params))});
  out.push_back({"exchange_reply", make_message(MsgType::ExchangeReply, x, encode_params(params))});
  out.push_back({"exchange_request_streamed", make_message(MsgType::ExchangeRequest, x, nullptr)});
  out.push_back({"exchange_payload", make_message(MsgType::ExchangePayload, x, encode_params(params))});
  out.push_back({"exchange_accept", make_message(MsgType::ExchangeAccept, x, nullptr)});
  ExchangeMsg chunk = x;  // the 2nd chunk of a 100,000-parameter snapshot in chunks of 65,536 (header only: a short payload)
  chunk.param_count = 100000;
  chunk.offset = 65536;
  chunk.chunk = 65536;
  chunk.view.clear();
  out.push_back({"exchange_payload_chunk", make_message(MsgType::ExchangePayload, chunk, encode_params(params))});
  out.push_back({"busy", make_message(ExchangeBusyMsg{7, "crossing exchange", view()})});
  out.push_back({"ping", make_message(MsgType::Ping, PingMsg{5, view(), {}})});
  out.push_back({"ack", make_message(MsgType::Ack, PingMsg{5, view(), "127.0.0.1:7002"})});
  out.push_back({"ping_req", make_message(PingReqMsg{5, "127.0.0.1:7002", view()})});
  out.push_back({"state_request", make_message(StateRequestMsg{1, 0, 4, false, true})});
  out.push_back({"state_request_extra", make_message(StateRequestMsg{1, 0, 16, true, true})});
  out.push_back({"state_chunk", make_message(StateChunkMsg{1, 0, 4, 12, view(), 16, false}, encode_params(params))});
  out.push_back({"state_chunk_extra",
                 make_message(StateChunkMsg{1, 0, 4, 12, view(), 16, true}, std::make_shared<const Bytes>(16, std::uint8_t{9}))});
  out.push_back({"leave", make_message(LeaveMsg{2, 12, 1.0, params.size(), view()}, encode_params(params))});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: fuzz_make_seeds DIR\n");
    return 2;
  }
  root = argv[1];

  // frame: a chunk-size byte, then whole frames.
  for (const auto& [name, m] : sample_messages()) {
    Bytes b{static_cast<std::uint8_t>(name.size() * 7)};
    append(b, net::encode_frame(m));
    write("frame", name, b);
  }
  {
    Bytes b{0};  // one byte at a time, several frames back to back
    for (const auto& [name, m] : sample_messages()) append(b, net::encode_frame(m));
    write("frame", "all_bytewise", b);
  }

  // messages: type - 1, u16 header length, header, payload.
  for (const auto& [name, m] : sample_messages()) {
    Bytes b{static_cast<std::uint8_t>(static_cast<int>(m.type) - 1)};
    put16(b, static_cast<std::uint16_t>(m.header.size()));
    append(b, m.header);
    if (m.payload) append(b, *m.payload);
    write("messages", name, b);
  }

  // handshake: mode (bit 0 keyed, bit 1 listener), then ops {op, u16 length, body}.
  const auto op = [](Bytes& b, std::uint8_t code, const Bytes& body) {
    b.push_back(code);
    put16(b, static_cast<std::uint16_t>(body.size()));
    append(b, body);
  };
  Hello h;
  h.peer_id = "127.0.0.1:7001";
  h.fingerprint = "logreg:64-10/ce/p650/f32";
  const Bytes hello = encode_hello(h);
  {
    Bytes b{2};  // open listener, a raw Hello record
    op(b, 0, hello);
    write("handshake", "open_hello", b);
  }
  {
    Bytes b{3};  // keyed listener: challenge, then a valid proof over a well-formed Hello
    op(b, 1, Bytes(32, 0x33));
    op(b, 3, Bytes{1, 14, 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 1});
    write("handshake", "keyed_listener", b);
  }
  {
    Bytes b{1};  // keyed dialler: challenge, then a valid proof over raw Hello bytes
    op(b, 1, Bytes(32, 0x44));
    op(b, 2, hello);
    write("handshake", "keyed_dialler", b);
  }
  {
    Bytes b{1};  // keyed: a plain Hello where a challenge belongs
    op(b, 0, hello);
    write("handshake", "keyed_plain_hello", b);
  }

  // codecs: selector, u32 n, bytes.
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 1e-3f, 65504.0f, -0.0f, 3.14159f, 7.0f};
  {
    Bytes b{0};
    put32(b, static_cast<std::uint32_t>(x.size()));
    append(b, encode_dense(PayloadCodec::Fp16, x));
    write("codecs", "fp16", b);
  }
  {
    Bytes b{1};
    put32(b, static_cast<std::uint32_t>(x.size()));
    append(b, encode_dense(PayloadCodec::Int8, x));
    write("codecs", "int8", b);
  }
  const std::vector<std::uint32_t> idx = {1, 4, 6};
  {
    Bytes b{2};
    put32(b, static_cast<std::uint32_t>(x.size()));
    append(b, encode_sparse_request(idx, x));
    write("codecs", "sparse_request", b);
  }
  {
    Bytes b{3};
    put32(b, static_cast<std::uint32_t>(idx.size()));
    append(b, encode_sparse_reply(idx, x));
    write("codecs", "sparse_reply", b);
  }

  // gossip: mode (codec, robust, staleness, seeds), then ops (see targets.cpp).
  for (std::uint8_t mode : {std::uint8_t{0}, std::uint8_t{4}, std::uint8_t{3 | 4}, std::uint8_t{16 | 1}}) {
    Bytes b{mode};
    b.push_back(0x80);  // a step
    b.push_back(0x40 | 0x08);  // a structured message from peer 3: kind 0 = ExchangeRequest
    for (int i = 0; i < 40; ++i) b.push_back(static_cast<std::uint8_t>(i % 3 == 0 ? 1 : 0));
    b.push_back(0x40 | 0x10);  // kind 4: Ping
    b.push_back(4);
    for (int i = 0; i < 8; ++i) b.push_back(1);
    b.push_back(0x81);  // more steps and a timer
    b.push_back(0x82);
    b.push_back(0xC1);
    b.push_back(0);
    write("gossip", "mode" + std::to_string(mode), b);
  }
  {
    // A streamed exchange from peer 3: a payload-less request (kind 130), then its payload
    // (kind 6: ExchangePayload), then an accept (kind 11) for an exchange we did not start.
    Bytes b{0};
    b.push_back(0x80);
    for (std::uint8_t kind : {std::uint8_t{130}, std::uint8_t{6}, std::uint8_t{11}}) {
      b.push_back(0x40 | 0x08);
      b.push_back(kind);
      for (int i = 0; i < 40; ++i) b.push_back(static_cast<std::uint8_t>(i % 3 == 0 ? 1 : 0));
    }
    b.push_back(0x81);
    write("gossip", "streamed", b);
  }
  fmt::print("seeds written under {}\n", root.string());
  return 0;
}
