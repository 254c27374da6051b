// Transport tests on loopback (127.0.0.1, port 0): exchanges both ways, the handshake's
// fingerprint check, hostile raw clients (random bytes, wrong magic, oversize lengths, cut-off
// and trickled frames) that must be rejected while the transport keeps serving good peers,
// send failures, idle close, and a prompt, idempotent stop().
//
// Every wait has a deadline: a broken transport fails these tests, it never hangs them.
#include <doctest/doctest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/socket.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "core/message.hpp"
#include "net/frame.hpp"
#include "net/transport.hpp"

using namespace rumor;
using namespace rumor::net;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

const std::string kFingerprint = "mlp[784,128,10]/params=101770/f32";

bool wait_until(const std::function<bool()>& pred, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Records every event of one transport, thread-safely.
struct Recorder {
  struct Note {
    PeerId peer;
    std::string reason;
  };
  mutable std::mutex mu;
  std::vector<std::pair<PeerId, Message>> messages;
  std::vector<Note> rejected, send_failed;

  TransportEvents events() {
    TransportEvents ev;
    ev.on_message = [this](const PeerId& from, Message&& m) {
      std::lock_guard lk(mu);
      messages.emplace_back(from, std::move(m));
    };
    ev.on_rejected = [this](const PeerId& p, const std::string& r) {
      std::lock_guard lk(mu);
      rejected.push_back({p, r});
    };
    ev.on_send_failed = [this](const PeerId& p, const std::string& r) {
      std::lock_guard lk(mu);
      send_failed.push_back({p, r});
    };
    return ev;
  }
  std::size_t n_messages() const {
    std::lock_guard lk(mu);
    return messages.size();
  }
  std::size_t n_rejected() const {
    std::lock_guard lk(mu);
    return rejected.size();
  }
  std::size_t n_send_failed() const {
    std::lock_guard lk(mu);
    return send_failed.size();
  }
  Note rejected_at(std::size_t i) const {
    std::lock_guard lk(mu);
    return rejected.at(i);
  }
  Note send_failed_at(std::size_t i) const {
    std::lock_guard lk(mu);
    return send_failed.at(i);
  }
  std::pair<PeerId, Message> message_at(std::size_t i) const {
    std::lock_guard lk(mu);
    return messages.at(i);
  }
};

TransportConfig test_config(const std::string& fingerprint = kFingerprint) {
  TransportConfig c;
  c.listen_host = "127.0.0.1";
  c.listen_port = 0;
  c.fingerprint = fingerprint;
  c.connect_timeout_s = 0.5;
  c.handshake_timeout_s = 0.5;
  c.frame_timeout_s = 0.3;
  c.min_rate_bytes_per_s = 4.0 * 1024 * 1024;
  c.idle_timeout_s = 30;
  c.max_header_bytes = 1 << 16;
  c.max_payload_bytes = 256ull << 20;
  return c;
}

// A transport with its recorder and a log that tests can read.
struct Node {
  Recorder rec;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  std::unique_ptr<Transport> t;

  explicit Node(TransportConfig cfg = test_config()) {
    static std::atomic<int> counter{0};
    auto log = std::make_shared<spdlog::logger>("net-test-" + std::to_string(counter++), sink);
    log->set_level(spdlog::level::debug);
    t = std::make_unique<Transport>(std::move(cfg), rec.events(), log);
    t->start();
  }
  PeerId id() const { return t->local_id(); }
  std::string log_text() const {
    std::string all;
    for (const auto& line : sink->last_formatted()) all += line;
    return all;
  }
};

Message make_message(MsgType type, std::size_t header_bytes, std::size_t payload_bytes,
                     std::uint32_t seed) {
  std::mt19937 rng(seed);
  Message m;
  m.type = type;
  m.header.resize(header_bytes);
  for (auto& b : m.header) b = static_cast<std::uint8_t>(rng());
  if (payload_bytes > 0) {
    auto p = std::make_shared<Bytes>(payload_bytes);
    for (auto& b : *p) b = static_cast<std::uint8_t>(rng());
    m.payload = p;
  }
  return m;
}

bool same(const Message& a, const Message& b) {
  if (a.type != b.type || a.header != b.header || a.payload_size() != b.payload_size()) return false;
  return a.payload_size() == 0 ||
         std::memcmp(a.payload->data(), b.payload->data(), a.payload_size()) == 0;
}

std::uint16_t port_of(const PeerId& id) {
  return static_cast<std::uint16_t>(std::stoi(id.substr(id.rfind(':') + 1)));
}

// A port on which nothing listens (bound, then released).
std::uint16_t dead_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto p = a.local_endpoint().port();
  a.close();
  return p;
}

// A raw TCP client speaking whatever bytes a test wants (blocking asio; no io thread).
struct RawClient {
  asio::io_context io;
  asio::ip::tcp::socket s{io};
  explicit RawClient(const PeerId& server) {
    s.connect({asio::ip::make_address("127.0.0.1"), port_of(server)});
  }
  bool write(std::span<const std::uint8_t> bytes) {
    asio::error_code ec;
    asio::write(s, asio::buffer(bytes.data(), bytes.size()), ec);
    return !ec;
  }
  bool write(const Bytes& b) { return write(std::span<const std::uint8_t>(b)); }
  // Sends FIN after what was written. (A close() with the server's unread Hello in our receive
  // buffer would send RST instead, which may discard data the server has not read yet.)
  void finish() {
    asio::error_code ec;
    s.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  }
};

Bytes hello_frame(const std::string& fingerprint, const PeerId& id = "127.0.0.1:1") {
  Hello h;
  h.peer_id = id;
  h.fingerprint = fingerprint;
  Message m;
  m.type = MsgType::Hello;
  m.header = encode_hello(h);
  return encode_frame(m);
}

// The transport still serves a well-behaved peer.
void check_still_serves(Node& server, std::uint32_t seed) {
  Node good;
  const auto before = server.rec.n_messages();
  const Message m = make_message(MsgType::ExchangeRequest, 24, 4096, seed);
  good.t->send(server.id(), m);
  REQUIRE(wait_until([&] { return server.rec.n_messages() == before + 1; }, 3.0));
  const auto got = server.rec.message_at(before);
  CHECK(got.first == good.id());
  CHECK(same(got.second, m));
}

}  // namespace

TEST_CASE("transport: two peers exchange messages both ways with payloads") {
  Node a, b;
  REQUIRE(a.id() != b.id());
  CHECK(a.id().rfind("127.0.0.1:", 0) == 0);
  const Message m1 = make_message(MsgType::ExchangeRequest, 40, 1 << 20, 1);
  a.t->send(b.id(), m1);
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
  const auto got1 = b.rec.message_at(0);
  CHECK(got1.first == a.id());
  CHECK(same(got1.second, m1));

  // The reply goes back over the same connection (B dials nobody).
  const Message m2 = make_message(MsgType::ExchangeReply, 17, 300000, 2);
  b.t->send(got1.first, m2);
  REQUIRE(wait_until([&] { return a.rec.n_messages() == 1; }, 3.0));
  const auto got2 = a.rec.message_at(0);
  CHECK(got2.first == b.id());
  CHECK(same(got2.second, m2));
  CHECK(a.t->stats().dialed == 1);
  CHECK(b.t->stats().dialed == 0);
  CHECK(b.t->stats().accepted == 1);

  // Many small messages without payload arrive complete and in order.
  for (std::uint32_t i = 0; i < 200; ++i) a.t->send(b.id(), make_message(MsgType::Ping, 8, 0, 100 + i));
  CHECK(a.t->flush(3.0));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 201; }, 3.0));
  for (std::uint32_t i = 0; i < 200; ++i)
    CHECK(same(b.rec.message_at(1 + i).second, make_message(MsgType::Ping, 8, 0, 100 + i)));

  const auto sa = a.t->stats(), sb = b.t->stats();
  CHECK(sa.frames_sent == 202);  // Hello + 201
  CHECK(sb.frames_recv == 202);
  CHECK(sa.bytes_sent == sb.bytes_recv);
  CHECK(sa.bytes_sent > (1u << 20));
  CHECK(sa.rejected == 0);
  CHECK(sb.rejected == 0);
  CHECK(a.rec.n_send_failed() == 0);
}

TEST_CASE("transport: a 100 MB payload arrives intact (throughput, informational)") {
  Node a, b;
  const std::size_t n = 100u << 20;
  auto payload = std::make_shared<Bytes>(n);
  std::mt19937_64 rng(5);
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    const auto v = rng();
    std::memcpy(payload->data() + i, &v, 8);
  }
  // Warm the connection up first so that the timing is the transfer only.
  a.t->send(b.id(), make_message(MsgType::Ping, 4, 0, 1));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
  Message m;
  m.type = MsgType::StateChunk;
  m.header = {1, 2, 3};
  m.payload = payload;
  // Three rounds: the first pays for the receive buffer's page faults, later ones reuse it
  // (PayloadPool) once the application has dropped the previous message.
  double best = 1e9;
  for (std::size_t round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    a.t->send(b.id(), m);
    REQUIRE(wait_until([&] { return b.rec.n_messages() == 2 + round; }, 30.0));
    const double s = since(t0);
    best = std::min(best, s);
    Message got;
    {
      std::lock_guard lk(b.rec.mu);
      got = std::move(b.rec.messages.back().second);
    }
    REQUIRE(got.payload);
    CHECK(got.payload->size() == n);
    CHECK(std::memcmp(got.payload->data(), payload->data(), n) == 0);
  }
  MESSAGE("100 MiB over loopback, best of 3: " << best << " s, " << (n / best / 1e9)
                                               << " GB/s (send hash + write + read + receive hash)");
  REQUIRE(a.t->flush(5.0));  // the sender counts its last bytes when the write completes
  CHECK(a.t->stats().bytes_sent == b.t->stats().bytes_recv);
}

TEST_CASE("transport: the receiver hands on the payload's digest and its float32 check, a NaN in the last word included") {
  Node a, b;
  const std::size_t n = 1'000'000;  // 4 MB: many reads, the last word in the last one
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.25f * static_cast<float>(i % 1013) - 100.0f;
  const auto send = [&](std::vector<float> x) {
    Message m;
    m.type = MsgType::ExchangePayload;
    m.header = {7, 7};
    m.payload = std::make_shared<Bytes>(reinterpret_cast<const std::uint8_t*>(x.data()),
                                        reinterpret_cast<const std::uint8_t*>(x.data() + x.size()));
    const std::size_t before = b.rec.n_messages();
    a.t->send(b.id(), m);
    REQUIRE(wait_until([&] { return b.rec.n_messages() == before + 1; }, 10.0));
    Message got = b.rec.message_at(before).second;
    REQUIRE(same(got, m));
    CHECK(got.payload_digest == hash64(*m.payload));
    return got.payload_finite;
  };
  CHECK(send(v) == std::optional<bool>(true));
  v.back() = NAN;
  CHECK(send(v) == std::optional<bool>(false));
  v.back() = 1.0f;
  v[n / 2] = -INFINITY;
  CHECK(send(v) == std::optional<bool>(false));
  CHECK(b.rec.n_rejected() == 0);
}

TEST_CASE("transport: a model fingerprint mismatch is rejected on both sides") {
  Node a(test_config("mlp/params=100/f32")), b(test_config("mlp/params=200/f32"));
  a.t->send(b.id(), make_message(MsgType::ExchangeRequest, 8, 1000, 1));
  REQUIRE(wait_until([&] { return a.rec.n_rejected() == 1 && b.rec.n_rejected() == 1; }, 3.0));
  const auto ra = a.rec.rejected_at(0), rb = b.rec.rejected_at(0);
  CHECK(ra.reason.find("fingerprint") != std::string::npos);
  CHECK(rb.reason.find("fingerprint") != std::string::npos);
  CHECK(ra.reason == "model fingerprint mismatch: ours 'mlp/params=100/f32', theirs 'mlp/params=200/f32'");
  CHECK(ra.peer == b.id());
  CHECK(rb.peer == a.id());
  // A's queued message was never written; it is reported once.
  REQUIRE(wait_until([&] { return a.rec.n_send_failed() == 1; }, 1.0));
  CHECK(a.rec.send_failed_at(0).peer == b.id());
  CHECK(b.rec.n_messages() == 0);
  CHECK(a.log_text().find("fingerprint") != std::string::npos);
  CHECK(b.t->stats().rejected == 1);
}

TEST_CASE("transport: hostile raw clients are rejected and the transport keeps working") {
  Node server;
  std::string want;
  {
    RawClient c(server.id());
    SUBCASE("random bytes") {
      std::mt19937 rng(11);
      Bytes junk(100);
      for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
      junk[0] = 'X';
      c.write(junk);
      want = "bad magic";
    }
    SUBCASE("an HTTP request (wrong magic)") {
      const std::string http = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
      c.write(Bytes(http.begin(), http.end()));
      want = "not a Rumor peer";
    }
    SUBCASE("oversize payload length before the handshake") {
      FrameHeader h;
      h.type = static_cast<std::uint16_t>(MsgType::Hello);
      h.payload_len = 1ull << 62;
      const auto fixed = write_frame_header(h);
      c.write(Bytes(fixed.begin(), fixed.end()));
      want = "exceeds the limit";
    }
    SUBCASE("oversize payload length after the handshake") {
      REQUIRE(c.write(hello_frame(kFingerprint)));
      FrameHeader h;
      h.type = static_cast<std::uint16_t>(MsgType::ExchangeRequest);
      h.payload_len = (256ull << 20) + 1;
      const auto fixed = write_frame_header(h);
      c.write(Bytes(fixed.begin(), fixed.end()));
      want = "payload of 268435457 bytes exceeds the limit of 268435456";
    }
    SUBCASE("a cut-off frame") {
      const Bytes hello = hello_frame(kFingerprint);
      c.write(std::span<const std::uint8_t>(hello).first(hello.size() / 2));
      std::this_thread::sleep_for(50ms);
      c.finish();
      want = "mid-frame";
    }
    SUBCASE("a cut-off frame after the handshake") {
      REQUIRE(c.write(hello_frame(kFingerprint)));
      const Bytes f = encode_frame(make_message(MsgType::ExchangeRequest, 10, 5000, 3));
      c.write(std::span<const std::uint8_t>(f).first(2000));
      std::this_thread::sleep_for(50ms);
      c.finish();
      want = "closed mid-frame after 2000 of 5042 bytes";
    }
    SUBCASE("a valid Hello, then a frame trickled one byte per 100 ms") {
      REQUIRE(c.write(hello_frame(kFingerprint)));
      const Bytes f = encode_frame(make_message(MsgType::ExchangeRequest, 10, 100, 3));
      for (std::size_t i = 0; i < f.size() && server.rec.n_rejected() == 0; ++i) {
        if (!c.write(std::span<const std::uint8_t>(&f[i], 1))) break;
        std::this_thread::sleep_for(100ms);
      }
      want = "trickling";
    }
    SUBCASE("a silent client") { want = "no valid Hello within 0.5 s"; }
    SUBCASE("a first frame that is not a Hello") {
      c.write(encode_frame(make_message(MsgType::ExchangeRequest, 10, 0, 3)));
      want = "expected Hello as the first frame, got ExchangeRequest";
    }
    SUBCASE("a malformed Hello") {
      Message m;
      m.type = MsgType::Hello;
      m.header = {1, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F};
      c.write(encode_frame(m));
      want = "malformed Hello";
    }
    SUBCASE("a second Hello") {
      REQUIRE(c.write(hello_frame(kFingerprint)));
      c.write(hello_frame(kFingerprint));
      want = "unexpected second Hello";
    }
    SUBCASE("a corrupted payload") {
      REQUIRE(c.write(hello_frame(kFingerprint)));
      Bytes f = encode_frame(make_message(MsgType::ExchangeRequest, 10, 1000, 3));
      f[500] ^= 1;
      c.write(f);
      want = "checksum mismatch";
    }
    REQUIRE(wait_until([&] { return server.rec.n_rejected() == 1; }, 3.0));
    const auto r = server.rec.rejected_at(0);
    INFO("reason: " << r.reason);
    CHECK(r.reason.find(want) != std::string::npos);
    CHECK(!r.peer.empty());
    CHECK(server.log_text().find("rejected") != std::string::npos);
    CHECK(server.t->stats().rejected == 1);
    CHECK(server.rec.n_messages() == 0);
  }
  check_still_serves(server, 77);
  CHECK(server.rec.n_rejected() == 1);
}

TEST_CASE("transport: send to a port where nothing listens fails within the connect timeout") {
  // A refused connect on loopback fails at once. The three messages must all be queued on the
  // one connection attempt before it can fail, or a later send() would (rightly) dial again
  // and fail again: on a busy machine this thread can be preempted between two send()s for
  // longer than the refusal takes. So the I/O thread is held (bounded) while they are queued;
  // the transport then handles the three sends, in order, before the connect's completion.
  std::atomic<bool> holding{false}, release{false};  // outlive `a`, whose I/O thread reads them
  Node a;
  const PeerId nobody = "127.0.0.1:" + std::to_string(dead_port());
  a.t->post_after(0.0, [&] {
    holding = true;
    const auto until = Clock::now() + 3s;  // never hold it forever, even if the test fails
    while (!release && Clock::now() < until) std::this_thread::sleep_for(1ms);
  });
  REQUIRE(wait_until([&] { return holding.load(); }, 2.0));
  const auto t0 = Clock::now();
  for (std::uint32_t i = 0; i < 3; ++i) a.t->send(nobody, make_message(MsgType::JoinRequest, 4, 10, i));
  release = true;
  REQUIRE(wait_until([&] { return a.rec.n_send_failed() >= 1; }, 2.0));
  CHECK(since(t0) < 0.5 + 0.2);
  const auto f = a.rec.send_failed_at(0);
  CHECK(f.peer == nobody);
  CHECK(f.reason.find("connect to " + nobody) != std::string::npos);
  std::this_thread::sleep_for(100ms);
  CHECK(a.t->stats().dialed == 1);    // one connection attempt for the three messages
  CHECK(a.rec.n_send_failed() == 1);  // once for the failure, not once per message
  CHECK(a.t->flush(0.5));             // the dropped messages no longer count as queued

  // Nothing retries by itself; the next send dials again.
  a.t->send(nobody, make_message(MsgType::JoinRequest, 4, 10, 9));
  REQUIRE(wait_until([&] { return a.rec.n_send_failed() == 2; }, 2.0));
  CHECK(a.t->stats().dialed == 2);
}

TEST_CASE("transport: a connect that never completes is cut by the connect deadline") {
  // A listener that never accepts and whose accept queue is full: Linux drops further SYNs, so
  // a connect to it hangs (the kernel keeps retrying) until our deadline cuts it.
  asio::io_context io;
  asio::ip::tcp::acceptor full(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  full.listen(0);
  const auto ep = full.local_endpoint();
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> fillers;
  for (int i = 0; i < 8; ++i) {
    auto s = std::make_unique<asio::ip::tcp::socket>(io);
    s->open(asio::ip::tcp::v4());
    // A raw non-blocking connect: asio's synchronous connect would wait for completion.
    const int fd = s->native_handle();
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::connect(fd, static_cast<const sockaddr*>(ep.data()), static_cast<socklen_t>(ep.size()));
    fillers.push_back(std::move(s));
  }
  std::this_thread::sleep_for(50ms);

  TransportConfig cfg = test_config();
  cfg.connect_timeout_s = 0.3;
  cfg.handshake_timeout_s = 0.3;
  Node a(cfg);
  const PeerId target = "127.0.0.1:" + std::to_string(ep.port());
  const auto t0 = Clock::now();
  a.t->send(target, make_message(MsgType::Ping, 1, 0, 1));
  REQUIRE(wait_until([&] { return a.rec.n_send_failed() == 1; }, 2.0));
  const double took = since(t0);
  const auto f = a.rec.send_failed_at(0);
  INFO("reason: " << f.reason);
  CHECK(f.peer == target);
  CHECK(took >= 0.25);
  CHECK(took < 0.3 + 0.3);
  // Either the connect hung (the usual case) or the kernel let it through and nobody said
  // Hello; both are cut by a deadline, never by waiting on the kernel's own retries.
  const bool timed_out = f.reason.find("timed out after 0.3 s") != std::string::npos ||
                         f.reason.find("no valid Hello within 0.3 s") != std::string::npos;
  CHECK(timed_out);
}

TEST_CASE("transport: a bad peer address is reported, not thrown") {
  Node a;
  CHECK_NOTHROW(a.t->send("no-port-here", make_message(MsgType::Ping, 1, 0, 1)));
  REQUIRE(wait_until([&] { return a.rec.n_send_failed() == 1; }, 2.0));
  CHECK(a.rec.send_failed_at(0).reason.find("bad peer address") != std::string::npos);
}

TEST_CASE("transport: localhost and IPv4 forms of the same peer both work") {
  Node a, b;
  a.t->send("localhost:" + std::to_string(port_of(b.id())), make_message(MsgType::Ping, 2, 0, 1));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
  CHECK(b.rec.message_at(0).first == a.id());
  // The connection was registered under B's own id (from its Hello) too: no second dial.
  a.t->send(b.id(), make_message(MsgType::Ping, 2, 0, 2));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 2; }, 3.0));
  CHECK(a.t->stats().dialed == 1);
}

TEST_CASE("transport: simultaneous connects in both directions both deliver") {
  Node a, b;
  a.t->send(b.id(), make_message(MsgType::Ping, 2, 0, 1));
  b.t->send(a.id(), make_message(MsgType::Ping, 2, 0, 2));
  REQUIRE(wait_until([&] { return a.rec.n_messages() == 1 && b.rec.n_messages() == 1; }, 3.0));
  for (std::uint32_t i = 0; i < 10; ++i) {
    a.t->send(b.id(), make_message(MsgType::Ack, 2, 10, 10 + i));
    b.t->send(a.id(), make_message(MsgType::Ack, 2, 10, 20 + i));
  }
  REQUIRE(wait_until([&] { return a.rec.n_messages() == 11 && b.rec.n_messages() == 11; }, 3.0));
  CHECK(a.rec.n_send_failed() == 0);
  CHECK(b.rec.n_send_failed() == 0);
}

TEST_CASE("transport: idle connections are closed and the next send redials") {
  TransportConfig cfg = test_config();
  cfg.idle_timeout_s = 0.2;
  Node a(cfg), b(cfg);
  a.t->send(b.id(), make_message(MsgType::Ping, 2, 0, 1));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
  std::this_thread::sleep_for(600ms);
  a.t->send(b.id(), make_message(MsgType::Ping, 2, 0, 2));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 2; }, 3.0));
  CHECK(a.t->stats().dialed == 2);
  CHECK(a.rec.n_send_failed() == 0);
  CHECK(a.rec.n_rejected() == 0);
  CHECK(b.rec.n_rejected() == 0);
}

TEST_CASE("transport: disconnect closes the connection, the next send redials") {
  Node a, b;
  a.t->send(b.id(), make_message(MsgType::Ping, 2, 0, 1));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
  a.t->disconnect(b.id());
  std::this_thread::sleep_for(50ms);
  a.t->send(b.id(), make_message(MsgType::Ping, 2, 0, 2));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 2; }, 3.0));
  CHECK(a.t->stats().dialed == 2);
  CHECK(b.rec.n_rejected() == 0);
}

TEST_CASE("transport: post_after runs on the I/O thread after the delay") {
  Node a;
  std::atomic<bool> ran{false};
  std::atomic<double> at{0};
  const auto t0 = Clock::now();
  a.t->post_after(0.1, [&] {
    at = since(t0);
    ran = true;
  });
  REQUIRE(wait_until([&] { return ran.load(); }, 2.0));
  CHECK(at.load() >= 0.1);
  CHECK(at.load() < 1.0);
}

TEST_CASE("transport: a listen address in use is a clear error") {
  Node a;
  TransportConfig cfg = test_config();
  cfg.listen_port = port_of(a.id());
  Recorder r;
  Transport t(cfg, r.events(), nullptr);
  try {
    t.start();
    FAIL("start() should have thrown");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(a.id()) != std::string::npos);
  }
}

TEST_CASE("transport: flush() waits until the peer has the bytes, not only until they are written") {
  // B stops reading for a while (its handler holds the I/O thread on the first message), so A's
  // last frame sits in A's kernel send queue, written but not acknowledged. A flush that
  // returned then, and the stop() after it, reset the connection and dropped that frame: on the
  // testbed's S4 a finished peer's last reply to the peer on 10 Mbit was cut at 373 of 470 KB,
  // and that peer waited out its exchange deadline (docs/testbed.md).
  std::atomic<bool> hold{true};
  TransportEvents ev;
  std::atomic<int> got{0};
  std::atomic<std::size_t> payload_bytes{0};
  ev.on_message = [&](const PeerId&, Message&& m) {
    if (got.fetch_add(1) == 0)
      while (hold.load()) std::this_thread::sleep_for(1ms);  // B reads nothing meanwhile
    payload_bytes += m.payload_size();
  };
  Transport b(test_config(), ev, nullptr);
  b.start();
  Node a;
  a.t->send(b.local_id(), make_message(MsgType::Ping, 4, 0, 1));
  REQUIRE(wait_until([&] { return got.load() == 1; }, 3.0));  // B's I/O thread is held
  const std::size_t n = 384u << 10;                         // fits A's send buffer, not B's window
  a.t->send(b.local_id(), make_message(MsgType::ExchangeReply, 16, n, 2));
  std::thread release([&] {
    std::this_thread::sleep_for(400ms);
    hold = false;
  });
  const auto t0 = Clock::now();
  const bool flushed = a.t->flush(5.0);
  const double waited = since(t0);
  release.join();
  INFO("flush returned " << flushed << " after " << waited << " s (B read again after 0.4 s)");
  CHECK(flushed);
  CHECK(waited > 0.3);  // not before B read the bytes
  a.t->stop();          // after a flush that returned true, nothing is lost by stopping
  REQUIRE(wait_until([&] { return got.load() == 2; }, 3.0));
  CHECK(payload_bytes.load() == n);
  // With nobody reading, flush() gives up at its deadline and says so.
  hold = true;
  got = 0;
  Node c;
  c.t->send(b.local_id(), make_message(MsgType::Ping, 4, 0, 3));
  REQUIRE(wait_until([&] { return got.load() == 1; }, 3.0));
  c.t->send(b.local_id(), make_message(MsgType::ExchangeReply, 16, n, 4));
  const auto t1 = Clock::now();
  CHECK_FALSE(c.t->flush(0.3));
  CHECK(since(t1) < 2.0);
  hold = false;
  b.stop();
}

// A peer that stops (or exits) with our request read and not handled never answers it: the
// requester must hear it when the connection closes, not at its own exchange deadline (S4's
// home peer waited 5 s for a peer that had finished). One that answered closes quietly.
TEST_CASE("transport: a peer that closes with our messages unanswered is reported at once, one that answered is not") {
  {
    Node a, b;
    a.t->send(b.id(), make_message(MsgType::ExchangeRequest, 40, 1000, 1));
    REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
    b.t->send(a.id(), make_message(MsgType::ExchangeBusy, 20, 0, 2));
    REQUIRE(wait_until([&] { return a.rec.n_messages() == 1; }, 3.0));
    b.t->stop();
    std::this_thread::sleep_for(300ms);
    CHECK(a.rec.n_send_failed() == 0);
  }
  {
    Node a, b;
    a.t->send(b.id(), make_message(MsgType::ExchangeRequest, 40, 1000, 1));
    a.t->send(b.id(), make_message(MsgType::ExchangePayload, 40, 5000, 2));
    REQUIRE(wait_until([&] { return b.rec.n_messages() == 2; }, 3.0));
    const auto t0 = Clock::now();
    b.t->stop();
    REQUIRE(wait_until([&] { return a.rec.n_send_failed() == 1; }, 3.0));
    CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 1.0);
    const auto n = a.rec.send_failed_at(0);
    CHECK(n.peer == b.id());
    INFO(n.reason);
    CHECK(n.reason.find("2 message(s) we sent it unanswered") != std::string::npos);
    std::this_thread::sleep_for(100ms);
    CHECK(a.rec.n_send_failed() == 1);  // once
    CHECK(a.rec.n_rejected() == 0);
  }
}

// The same when the remote stops in the middle of a frame it was sending us: a finished peer
// whose reply to the peer on S4's 10 Mbit link had not drained in its 3 s flush. The cut frame
// is bad input (rejected, as before), and what we sent it is reported as not delivered.
TEST_CASE("transport: a peer cut off in the middle of its frame to us is reported with our messages unanswered") {
  std::atomic<bool> hold{true};
  std::atomic<int> got{0};
  Recorder rec;
  TransportEvents ev = rec.events();
  ev.on_message = [&](const PeerId&, Message&&) {
    if (got.fetch_add(1) == 0)
      while (hold.load()) std::this_thread::sleep_for(1ms);  // A reads nothing meanwhile
  };
  Transport a(test_config(), ev, nullptr);
  a.start();
  Node b, c;
  a.send(b.id(), make_message(MsgType::ExchangeRequest, 40, 1000, 1));
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
  c.t->send(a.local_id(), make_message(MsgType::Ping, 4, 0, 2));
  REQUIRE(wait_until([&] { return got.load() == 1; }, 3.0));  // A's I/O thread is held
  b.t->send(a.local_id(), make_message(MsgType::ExchangeReply, 16, 32u << 20, 3));  // more than the sockets hold
  std::this_thread::sleep_for(100ms);
  b.t->stop();  // the rest of the frame is dropped
  hold = false;
  REQUIRE(wait_until([&] { return rec.n_send_failed() == 1; }, 3.0));
  const auto n = rec.send_failed_at(0);
  CHECK(n.peer == b.id());
  INFO(n.reason);
  CHECK(n.reason.find("mid-frame") != std::string::npos);
  CHECK(n.reason.find("1 message(s) we sent it unanswered") != std::string::npos);
  CHECK(rec.n_rejected() == 1);
  CHECK(got.load() == 1);  // the cut reply never arrived
  a.stop();
}

TEST_CASE("transport: stop() is prompt and idempotent") {
  auto a = std::make_unique<Node>();
  Node b;
  a->t->send(b.id(), make_message(MsgType::Ping, 2, 0, 1));
  b.t->send(a->id(), make_message(MsgType::Ping, 2, 0, 1));
  REQUIRE(wait_until([&] { return b.rec.n_messages() >= 1 && a->rec.n_messages() >= 1; }, 3.0));
  REQUIRE(b.t->flush(1.0));
  std::atomic<bool> fired{false};
  a->t->post_after(10.0, [&] { fired = true; });
  const PeerId a_id = a->id();
  const auto t0 = Clock::now();
  a->t->stop();
  CHECK(since(t0) < 0.5);
  a->t->stop();  // again: a no-op
  a->t->send(b.id(), make_message(MsgType::Ping, 2, 0, 2));  // no-ops after stop
  a->t->post_after(0.0, [&] { fired = true; });
  a->t->disconnect(b.id());
  CHECK(a->t->flush(0.1));
  a.reset();  // the destructor stops a third time
  CHECK_FALSE(fired.load());

  // The peer notices nothing bad: its next send to the stopped peer just fails. (Give it a
  // moment to read the EOF first; a frame written into a socket the remote has already closed
  // is lost like any TCP write, and the protocol's own deadlines cover that.)
  std::this_thread::sleep_for(100ms);
  b.t->send(a_id, make_message(MsgType::Ping, 2, 0, 3));
  REQUIRE(wait_until([&] { return b.rec.n_send_failed() == 1; }, 2.0));
  CHECK(b.rec.n_rejected() == 0);
  const auto t1 = Clock::now();
  b.t->stop();
  CHECK(since(t1) < 0.5);
}

TEST_CASE("transport: stop() from a callback on the I/O thread does not deadlock") {
  Node b;
  auto a = std::make_unique<Node>();
  std::atomic<bool> stopped{false};
  Transport* at = a->t.get();
  a->t->post_after(0.0, [&] {
    at->stop();
    stopped = true;
  });
  REQUIRE(wait_until([&] { return stopped.load(); }, 2.0));
  const auto t0 = Clock::now();
  a.reset();
  CHECK(since(t0) < 0.5);
}
