// Trust on loopback (docs/security.md): the swarm key's challenge-response through real
// transports (members talk; a peer without the key or with another one is refused and learns
// one nonce; a recorded handshake replayed through a relay is refused), TLS 1.3 with mutual
// certificates (a certificate from another CA is refused on both sides), key files.
//
// Every wait has a deadline. The TLS tests make their CA with examples/tls-test-ca.sh (the
// openssl command line) and are skipped, with a message, where openssl is missing.
#include <doctest/doctest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "core/message.hpp"
#include "net/auth.hpp"
#include "net/frame.hpp"
#include "net/handshake.hpp"
#include "net/transport.hpp"

using namespace rumor;
using namespace rumor::net;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;

namespace {

using Clock = std::chrono::steady_clock;
const std::string kFp = "mlp[784,128,10]/params=101770/f32";

Bytes key_of(const std::string& s) { return Bytes(s.begin(), s.end()); }
const Bytes kKey = key_of("a swarm key of thirty-two bytes!");
const Bytes kOtherKey = key_of("another key, also thirty-two....");

bool wait_until(const std::function<bool()>& pred, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

struct Recorder {
  mutable std::mutex mu;
  std::vector<std::pair<PeerId, Message>> messages;
  std::vector<std::string> rejected, send_failed;
  TransportEvents events() {
    TransportEvents ev;
    ev.on_message = [this](const PeerId& from, Message&& m) {
      std::lock_guard lk(mu);
      messages.emplace_back(from, std::move(m));
    };
    ev.on_rejected = [this](const PeerId&, const std::string& r) {
      std::lock_guard lk(mu);
      rejected.push_back(r);
    };
    ev.on_send_failed = [this](const PeerId&, const std::string& r) {
      std::lock_guard lk(mu);
      send_failed.push_back(r);
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
  std::string rejected_at(std::size_t i) const {
    std::lock_guard lk(mu);
    return rejected.at(i);
  }
  std::pair<PeerId, Message> message_at(std::size_t i) const {
    std::lock_guard lk(mu);
    return messages.at(i);
  }
};

TransportConfig config(Bytes key = {}) {
  TransportConfig c;
  c.fingerprint = kFp;
  c.connect_timeout_s = 1.0;
  c.handshake_timeout_s = 1.0;
  c.frame_timeout_s = 1.0;
  c.max_payload_bytes = 64u << 20;
  c.swarm_key = std::move(key);
  return c;
}

struct Node {
  Recorder rec;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  std::unique_ptr<Transport> t;
  explicit Node(TransportConfig cfg) {
    static std::atomic<int> counter{0};
    auto log = std::make_shared<spdlog::logger>("trust-test-" + std::to_string(counter++), sink);
    log->set_level(spdlog::level::debug);
    t = std::make_unique<Transport>(std::move(cfg), rec.events(), log);
    t->start();
  }
  PeerId id() const { return t->local_id(); }
};

Message test_message(std::size_t payload_bytes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Message m;
  m.type = MsgType::ExchangeRequest;
  m.header = {1, 2, 3, 4};
  if (payload_bytes) {
    auto p = std::make_shared<Bytes>(payload_bytes);
    for (auto& b : *p) b = static_cast<std::uint8_t>(rng());
    m.payload = p;
  }
  return m;
}

bool same(const Message& a, const Message& b) {
  return a.type == b.type && a.header == b.header && a.payload_size() == b.payload_size() &&
         (a.payload_size() == 0 || *a.payload == *b.payload);
}

std::uint16_t port_of(const PeerId& id) { return static_cast<std::uint16_t>(std::stoi(id.substr(id.rfind(':') + 1))); }

// A raw client: writes what a test wants and reads everything the server sends until it
// closes (or a deadline).
struct RawClient {
  asio::io_context io;
  tcp::socket s{io};
  explicit RawClient(const PeerId& server) { s.connect({asio::ip::make_address("127.0.0.1"), port_of(server)}); }
  void write(const Bytes& b) {
    asio::error_code ec;
    asio::write(s, asio::buffer(b), ec);
  }
  // Reads until `n` bytes are in (or EOF / deadline).
  Bytes read(std::size_t n, double timeout_s) {
    Bytes out;
    s.non_blocking(true);
    const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    std::uint8_t buf[4096];
    while (out.size() < n && Clock::now() < end) {
      asio::error_code ec;
      const std::size_t k = s.read_some(asio::buffer(buf), ec);
      if (ec == asio::error::would_block) {
        std::this_thread::sleep_for(2ms);
        continue;
      }
      if (ec) break;
      out.insert(out.end(), buf, buf + k);
    }
    return out;
  }
  Bytes read_to_eof(double timeout_s) { return read(SIZE_MAX, timeout_s); }
};

std::vector<Message> frames_of(const Bytes& bytes) {
  FrameDecoder dec;
  std::vector<Message> out;
  dec.feed(bytes, out);
  return out;
}

// A TCP relay that forwards one connection to `target` and records what the dialler sent: the
// position of an eavesdropper who later replays it.
class Relay {
 public:
  explicit Relay(const PeerId& target) : target_port_(port_of(target)) {
    acceptor_.async_accept([this](const asio::error_code& ec, tcp::socket s) {
      if (ec) return;
      client_ = std::make_unique<tcp::socket>(std::move(s));
      server_ = std::make_unique<tcp::socket>(io_);
      server_->async_connect({asio::ip::make_address("127.0.0.1"), target_port_}, [this](const asio::error_code& e) {
        if (e) return;
        pump(*client_, *server_, up_buf_, true);
        pump(*server_, *client_, down_buf_, false);
      });
    });
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Relay() {
    io_.stop();
    thread_.join();
  }
  PeerId address() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  Bytes recorded() const {
    std::lock_guard lk(mu_);
    return recorded_;
  }

 private:
  void pump(tcp::socket& from, tcp::socket& to, std::array<std::uint8_t, 65536>& buf, bool record) {
    from.async_read_some(asio::buffer(buf), [this, &from, &to, &buf, record](const asio::error_code& ec, std::size_t n) {
      if (ec) {
        asio::error_code ignored;
        to.shutdown(tcp::socket::shutdown_send, ignored);
        return;
      }
      if (record) {
        std::lock_guard lk(mu_);
        recorded_.insert(recorded_.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      }
      asio::async_write(to, asio::buffer(buf.data(), n), [this, &from, &to, &buf, record](const asio::error_code& e, std::size_t) {
        if (!e) pump(from, to, buf, record);
      });
    });
  }
  asio::io_context io_;
  tcp::acceptor acceptor_{io_, {asio::ip::make_address("127.0.0.1"), 0}};
  std::uint16_t target_port_;
  std::unique_ptr<tcp::socket> client_, server_;
  std::array<std::uint8_t, 65536> up_buf_{}, down_buf_{};
  mutable std::mutex mu_;
  Bytes recorded_;
  std::thread thread_;
};

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("rumor-trust-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Two CAs: "swarm" signs a, b, c; "other" signs x. Made once per test binary run. Empty if the
// openssl command line is missing.
fs::path test_cas() {
  static const fs::path dir = [] {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) return fs::path();
    const fs::path d = temp_dir("ca");
    const std::string script = std::string(RUMOR_SOURCE_DIR) + "/examples/tls-test-ca.sh";
    const std::string cmd = "bash '" + script + "' '" + (d / "swarm").string() + "' a b c && bash '" + script + "' '" +
                            (d / "other").string() + "' x";
    if (std::system(cmd.c_str()) != 0) return fs::path();
    return d;
  }();
  return dir;
}

TransportConfig tls_config(const fs::path& ca_dir, const std::string& name, Bytes key = {}) {
  TransportConfig c = config(std::move(key));
  c.tls_cert = (ca_dir / (name + ".crt")).string();
  c.tls_key = (ca_dir / (name + ".key")).string();
  c.tls_ca = (ca_dir / "ca.crt").string();
  return c;
}

}  // namespace

TEST_CASE("trust: members with the swarm key exchange messages both ways") {
  Node a(config(kKey)), b(config(kKey));
  const Message m = test_message(1 << 20, 1);
  a.t->send(b.id(), m);
  REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
  CHECK(b.rec.message_at(0).first == a.id());
  CHECK(same(b.rec.message_at(0).second, m));
  b.t->send(a.id(), test_message(100, 2));
  REQUIRE(wait_until([&] { return a.rec.n_messages() == 1; }, 3.0));
  CHECK(a.t->stats().dialed == 1);
  CHECK(a.rec.n_rejected() == 0);
  CHECK(b.rec.n_rejected() == 0);
}

TEST_CASE("trust: a peer without the key is refused on both sides and nothing is delivered") {
  Node keyed(config(kKey)), open(config());
  open.t->send(keyed.id(), test_message(1000, 1));
  REQUIRE(wait_until([&] { return keyed.rec.n_rejected() == 1 && open.rec.n_rejected() == 1; }, 3.0));
  INFO("keyed side: " << keyed.rec.rejected_at(0) << "; open side: " << open.rec.rejected_at(0));
  CHECK(keyed.rec.rejected_at(0).find("no swarm key") != std::string::npos);
  CHECK(open.rec.rejected_at(0).find("requires a swarm key") != std::string::npos);
  CHECK(keyed.rec.n_messages() == 0);
  // And the other way round: a keyed dialler refuses an open listener.
  keyed.t->send(open.id(), test_message(10, 2));
  REQUIRE(wait_until([&] { return keyed.rec.n_rejected() == 2 && open.rec.n_rejected() == 2; }, 3.0));
  CHECK(open.rec.n_messages() == 0);
}

TEST_CASE("trust: a stranger learns one random nonce and nothing else") {
  Node server(config(kKey));
  SUBCASE("a plain Hello") {
    RawClient c(server.id());
    Hello h;
    h.peer_id = "127.0.0.1:9";
    h.fingerprint = kFp;
    c.write(encode_frame({MsgType::Hello, encode_hello(h), nullptr}));
    const Bytes got = c.read_to_eof(3.0);
    const auto frames = frames_of(got);
    REQUIRE(frames.size() == 1);
    CHECK(got.size() == kFrameHeaderSize + kChallengeRecordSize);
    CHECK(record_kind(frames[0].header) == RecordKind::Challenge);
  }
  SUBCASE("a challenge and a proof made with another key") {
    RawClient c(server.id());
    HandshakeConfig hc;
    hc.local_id = "127.0.0.1:9";
    hc.fingerprint = kFp;
    hc.key = kOtherKey;
    Handshake hs(HandshakeRole::Dialler, hc, random_nonce());
    for (const auto& m : hs.start()) c.write(encode_frame(m));
    const Bytes challenge = c.read(kFrameHeaderSize + kChallengeRecordSize, 3.0);
    const auto frames = frames_of(challenge);
    REQUIRE(frames.size() == 1);
    const auto step = hs.on_frame(frames[0]);
    REQUIRE(step.send.size() == 1);
    c.write(encode_frame(step.send[0]));
    CHECK(c.read_to_eof(3.0).empty());  // closed: no proof, no Hello, no id, no fingerprint
  }
  REQUIRE(wait_until([&] { return server.rec.n_rejected() == 1; }, 3.0));
  CHECK(server.rec.n_messages() == 0);
}

TEST_CASE("trust: a peer with another key is refused") {
  Node a(config(kOtherKey)), b(config(kKey));
  a.t->send(b.id(), test_message(1000, 1));
  REQUIRE(wait_until([&] { return b.rec.n_rejected() == 1; }, 3.0));
  CHECK(b.rec.rejected_at(0).find("does not match our swarm key") != std::string::npos);
  std::this_thread::sleep_for(50ms);
  CHECK(b.rec.n_messages() == 0);
  CHECK(a.rec.n_messages() == 0);
}

TEST_CASE("trust: a recorded handshake replayed later is refused") {
  Node a(config(kKey)), b(config(kKey));
  Bytes recorded;
  {
    Relay relay(b.id());
    a.t->send(relay.address(), test_message(2000, 1));
    REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 3.0));
    REQUIRE(a.t->flush(2.0));
    recorded = relay.recorded();
  }
  CHECK(b.rec.message_at(0).first == a.id());
  // Everything A sent through the relay (challenge, proof, the message), replayed to B.
  RawClient c(b.id());
  c.write(recorded);
  c.read_to_eof(3.0);
  REQUIRE(wait_until([&] { return b.rec.n_rejected() == 1; }, 3.0));
  INFO("reason: " << b.rec.rejected_at(0));
  CHECK(b.rec.rejected_at(0).find("replayed") != std::string::npos);
  std::this_thread::sleep_for(50ms);
  CHECK(b.rec.n_messages() == 1);  // nothing new delivered
}

TEST_CASE("trust: a keyed handshake that never completes is cut by the handshake deadline") {
  Node server(config(kKey));
  RawClient c(server.id());
  const auto t0 = Clock::now();
  const Bytes got = c.read_to_eof(3.0);
  CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 2.0);
  REQUIRE(wait_until([&] { return server.rec.n_rejected() == 1; }, 1.0));
  CHECK(server.rec.rejected_at(0).find("swarm-key handshake not completed within 1 s") != std::string::npos);
  CHECK(got.size() == kFrameHeaderSize + kChallengeRecordSize);
}

TEST_CASE("trust: a first frame over the handshake limit is refused before it is read") {
  Node server(config(kKey));
  RawClient c(server.id());
  FrameHeader h;
  h.type = static_cast<std::uint16_t>(MsgType::Hello);
  h.header_len = 4097;
  const auto fixed = write_frame_header(h);
  c.write(Bytes(fixed.begin(), fixed.end()));
  REQUIRE(wait_until([&] { return server.rec.n_rejected() == 1; }, 3.0));
  CHECK(server.rec.rejected_at(0).find("header of 4097 bytes exceeds the limit of 4096") != std::string::npos);
}

TEST_CASE("trust: swarm key files") {
  const auto d = temp_dir("keys");
  const auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(d / name, std::ios::binary) << content;
    ::chmod((d / name).c_str(), 0600);
    return (d / name).string();
  };
  const auto good = load_swarm_key(write("good", std::string(32, 'k')));
  CHECK(good.secret.size() == 32);
  CHECK(!good.readable_by_others);
  CHECK(load_swarm_key(write("sixteen", std::string(16, '\0'))).secret.size() == 16);  // any content
  const auto refused = [](const std::string& path, const std::string& want) {
    try {
      load_swarm_key(path);
      FAIL("accepted " << path);
    } catch (const std::invalid_argument& e) {
      INFO(std::string(e.what()));
      CHECK(std::string(e.what()).find(want) != std::string::npos);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
  };
  refused(write("short", std::string(15, 'k')), "at least 16");
  refused(write("empty", ""), "only 0 bytes");
  refused((d / "missing").string(), "cannot read");
  refused(d.string(), "not a regular file");
  refused(write("huge", std::string(kMaxSwarmKeyBytes + 1, 'k')), "longer than");
  const auto open_key = write("open", std::string(32, 'k'));
  ::chmod(open_key.c_str(), 0644);
  CHECK(load_swarm_key(open_key).readable_by_others);
}

TEST_CASE("tls: members with certificates from the swarm CA talk, TLS and the key combine") {
  const fs::path ca = test_cas();
  if (ca.empty()) {
    MESSAGE("openssl command line not found; TLS test skipped");
    return;
  }
  for (const bool with_key : {false, true}) {
    CAPTURE(with_key);
    Node a(tls_config(ca / "swarm", "a", with_key ? kKey : Bytes{})), b(tls_config(ca / "swarm", "b", with_key ? kKey : Bytes{}));
    const Message m = test_message(3 << 20, 7);
    a.t->send(b.id(), m);
    REQUIRE(wait_until([&] { return b.rec.n_messages() == 1; }, 5.0));
    CHECK(same(b.rec.message_at(0).second, m));
    CHECK(b.rec.message_at(0).first == a.id());
    b.t->send(a.id(), test_message(100, 8));
    REQUIRE(wait_until([&] { return a.rec.n_messages() == 1; }, 5.0));
    CHECK(a.rec.n_rejected() == 0);
    CHECK(b.rec.n_rejected() == 0);
  }
}

TEST_CASE("tls: a peer whose certificate comes from another CA is refused on both sides") {
  const fs::path ca = test_cas();
  if (ca.empty()) {
    MESSAGE("openssl command line not found; TLS test skipped");
    return;
  }
  Node member(tls_config(ca / "swarm", "a"));
  SUBCASE("an outsider dials a member") {
    Node outsider(tls_config(ca / "other", "x"));
    outsider.t->send(member.id(), test_message(1000, 1));
    REQUIRE(wait_until([&] { return member.rec.n_rejected() == 1 && outsider.rec.n_rejected() == 1; }, 5.0));
    INFO("member: " << member.rec.rejected_at(0) << "; outsider: " << outsider.rec.rejected_at(0));
    CHECK(member.rec.rejected_at(0).find("TLS handshake failed") != std::string::npos);
    CHECK(outsider.rec.rejected_at(0).find("TLS handshake failed") != std::string::npos);
    CHECK(outsider.rec.rejected_at(0).find("certificate verify failed") != std::string::npos);
  }
  SUBCASE("an outsider that trusts our CA but holds a certificate from its own") {
    TransportConfig c = tls_config(ca / "other", "x");
    c.tls_ca = (ca / "swarm" / "ca.crt").string();
    Node outsider(c);
    outsider.t->send(member.id(), test_message(1000, 1));
    REQUIRE(wait_until([&] { return member.rec.n_rejected() == 1; }, 5.0));
    INFO("member: " << member.rec.rejected_at(0));
    CHECK(member.rec.rejected_at(0).find("TLS handshake failed") != std::string::npos);
  }
  SUBCASE("a plain TCP peer") {
    Node plain(config());
    plain.t->send(member.id(), test_message(1000, 1));
    REQUIRE(wait_until([&] { return member.rec.n_rejected() == 1; }, 5.0));
    CHECK(member.rec.rejected_at(0).find("TLS handshake failed") != std::string::npos);
  }
  std::this_thread::sleep_for(50ms);
  CHECK(member.rec.n_messages() == 0);
}

TEST_CASE("tls: unusable files are refused at start with the flag and the file named") {
  const fs::path ca = test_cas();
  if (ca.empty()) {
    MESSAGE("openssl command line not found; TLS test skipped");
    return;
  }
  const auto refused = [](TransportConfig c, const std::string& want) {
    Recorder r;
    Transport t(std::move(c), r.events(), nullptr);
    try {
      t.start();
      FAIL("started");
    } catch (const std::invalid_argument& e) {
      INFO(std::string(e.what()));
      CHECK(std::string(e.what()).find(want) != std::string::npos);
    }
  };
  TransportConfig c = tls_config(ca / "swarm", "a");
  c.tls_ca = "/nonexistent/ca.crt";
  refused(c, "--tls-ca '/nonexistent/ca.crt'");
  c = tls_config(ca / "swarm", "a");
  c.tls_key = (ca / "swarm" / "b.key").string();
  refused(c, "is it the key of --tls-cert");
  c = tls_config(ca / "swarm", "a");
  c.tls_cert.clear();
  refused(c, "all three");
}
