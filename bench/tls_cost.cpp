// bench_tls_cost: what trust costs the transport, on loopback (docs/security.md has results).
//
// Two Transports in this process; A sends an exchange-sized message, B answers with one of the
// same size from its callback, and A waits for the answer before sending the next (one exchange
// in flight, like a pair of peers). Reported per mode (plain TCP, swarm key, TLS 1.3, TLS + key)
// and payload size: exchanges per second and MB/s of parameters moved (both directions), and
// the time to set up a fresh connection (connect + TLS + handshake + the first message).
//
// Usage: bench_tls_cost [--sizes BYTES,...] [--seconds S] [--connections N] [--rounds R] (--help)
// It makes a throwaway CA with examples/tls-test-ca.sh (needs the openssl command line).
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/flags.hpp"
#include "net/transport.hpp"

using namespace rumor;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Mode {
  const char* name;
  bool key, tls;
};

net::TransportConfig config(const Mode& m, const fs::path& ca, const std::string& who, std::size_t max_payload) {
  net::TransportConfig c;
  c.fingerprint = "bench";
  c.max_payload_bytes = max_payload + 1024;
  if (m.key) c.swarm_key = Bytes(32, 0x5a);
  if (m.tls) {
    c.tls_cert = (ca / (who + ".crt")).string();
    c.tls_key = (ca / (who + ".key")).string();
    c.tls_ca = (ca / "ca.crt").string();
  }
  return c;
}

// Counts messages received and lets the caller wait for the next one.
struct Counter {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t n = 0;
  void bump() {
    {
      std::lock_guard lk(mu);
      ++n;
    }
    cv.notify_all();
  }
  bool wait_for(std::uint64_t target, double timeout_s) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return n >= target; });
  }
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Result {
  double exchanges_per_s = 0, mb_per_s = 0, connect_ms = 0;
};

Result measure(const Mode& mode, const fs::path& ca, std::size_t bytes, double seconds, int connections) {
  auto payload = std::make_shared<Bytes>(bytes, 0x42);
  Message msg;
  msg.type = MsgType::ExchangeRequest;
  msg.header = {1, 2, 3};
  msg.payload = payload;
  Counter at_a;
  net::Transport* b_ptr = nullptr;
  net::TransportEvents ea, eb;
  ea.on_message = [&](const PeerId&, Message&&) { at_a.bump(); };
  eb.on_message = [&](const PeerId& from, Message&& m) {
    Message reply;
    reply.type = MsgType::ExchangeReply;
    reply.header = m.header;
    reply.payload = m.payload;  // the same bytes back (never copied)
    b_ptr->send(from, std::move(reply));
  };
  auto quiet = spdlog::default_logger()->clone("bench");
  quiet->set_level(spdlog::level::warn);
  net::Transport a(config(mode, ca, "a", bytes), ea, quiet), b(config(mode, ca, "b", bytes), eb, quiet);
  b_ptr = &b;
  a.start();
  b.start();
  Result r;
  // Connection set-up: a fresh dialler each time sends a small message and waits for the answer
  // (connect + TLS + handshake + one round trip).
  {
    Message ping = msg;
    ping.payload = nullptr;
    double total = 0;
    for (int i = 0; i < connections; ++i) {
      Counter at_c;
      net::TransportEvents ec;
      ec.on_message = [&](const PeerId&, Message&&) { at_c.bump(); };
      net::Transport c(config(mode, ca, "a", bytes), ec, quiet);
      c.start();
      const auto t0 = Clock::now();
      c.send(b.local_id(), ping);
      if (!at_c.wait_for(1, 10)) {
        fmt::print(stderr, "no answer on connection {} ({})\n", i, mode.name);
        std::exit(1);
      }
      total += seconds_since(t0);
      c.stop();
    }
    r.connect_ms = 1e3 * total / connections;
  }
  // Exchanges on one warm connection.
  a.send(b.local_id(), msg);
  at_a.wait_for(at_a.n + 1, 30);  // (warm-up: the first one pays for buffers)
  std::uint64_t done = 0;
  const auto t0 = Clock::now();
  while (seconds_since(t0) < seconds) {
    const std::uint64_t before = at_a.n;
    a.send(b.local_id(), msg);
    if (!at_a.wait_for(before + 1, 30)) {
      fmt::print(stderr, "exchange timed out ({})\n", mode.name);
      std::exit(1);
    }
    ++done;
  }
  const double s = seconds_since(t0);
  r.exchanges_per_s = done / s;
  r.mb_per_s = 2.0 * static_cast<double>(bytes) * done / s / 1e6;
  a.stop();
  b.stop();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes = {235146 * 4, 16u << 20};  // the default MLP's parameters; a 4M-parameter model
  double seconds = 2.0;
  int connections = 20, rounds = 3;
  CLI::App app{"What trust costs the transport on loopback: exchanges/s, MB/s and connection set-up per mode (plain TCP, "
               "swarm key, TLS 1.3, TLS + key); docs/security.md.",
               "bench_tls_cost"};
  app.add_option("--sizes", sizes, "payload sizes in bytes, comma-separated")
      ->delimiter(',')
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--seconds", seconds, "seconds of exchanges per mode, size and round")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--connections", connections, "fresh connections timed per mode, size and round")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--rounds", rounds, "rounds, interleaving the modes; the best of them is printed")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const fs::path ca = fs::temp_directory_path() / ("rumor-bench-ca-" + std::to_string(::getpid()));
  const std::string cmd = "bash '" + std::string(RUMOR_SOURCE_DIR) + "/examples/tls-test-ca.sh' '" + ca.string() + "' a b";
  if (std::system(cmd.c_str()) != 0) {
    fmt::print(stderr, "could not make a test CA (is openssl installed?)\n");
    return 1;
  }
  const Mode modes[] = {{"plain TCP", false, false}, {"swarm key", true, false}, {"TLS 1.3", false, true},
                        {"TLS 1.3 + key", true, true}};
  fmt::print("{:<14} {:>12} {:>12} {:>10} {:>11} {:>12}   (best of {} rounds of {:.1f} s)\n", "mode", "payload", "exchanges/s",
              "MB/s", "vs plain", "connect ms", rounds, seconds);
  for (const std::size_t bytes : sizes) {
    // Rounds interleave the modes, so a burst of load elsewhere on the machine hits them alike.
    std::vector<Result> best(std::size(modes));
    for (int round = 0; round < rounds; ++round)
      for (std::size_t i = 0; i < std::size(modes); ++i) {
        const Result r = measure(modes[i], ca, bytes, seconds, connections);
        best[i].exchanges_per_s = std::max(best[i].exchanges_per_s, r.exchanges_per_s);
        best[i].mb_per_s = std::max(best[i].mb_per_s, r.mb_per_s);
        best[i].connect_ms = round == 0 ? r.connect_ms : std::min(best[i].connect_ms, r.connect_ms);
      }
    for (std::size_t i = 0; i < std::size(modes); ++i)
      fmt::print("{:<14} {:10.2f}MB {:12.1f} {:10.0f} {:10.0f}% {:12.2f}\n", modes[i].name, bytes / 1e6, best[i].exchanges_per_s,
                  best[i].mb_per_s, 100.0 * best[i].mb_per_s / best[0].mb_per_s, best[i].connect_ms);
    std::fflush(stdout);
  }
  fs::remove_all(ca);
  return 0;
}
