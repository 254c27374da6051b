// What --metrics-listen costs the loop thread (peer/metrics_endpoint.hpp): nanoseconds per
// counted event (exchange_done) and per publish() (a PeerSample; with the members of a 64-peer
// view once a second of simulated time, as Runtime::publish does), alone and while another
// thread scrapes /metrics and reads /status.json as fast as it can over loopback. publish()'s
// figure includes the /status.json snapshot it builds every 4th call (once a second of the peer's
// time while somebody reads it: histories of up to 600 points, 32 member curves).
//
//   bench_metrics_endpoint_cost [--events N] [--publishes N]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "peer/metrics_endpoint.hpp"

namespace {
using Clock = std::chrono::steady_clock;

// One plain HTTP/1.0 GET over loopback; returns the bytes received (0 on any failure).
std::size_t get(int port, const char* path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::size_t got = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = fmt::format("GET {} HTTP/1.0\r\n\r\n", path);
    if (::send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
  return got;
}

struct Result {
  double event_ns, publish_ns;
  std::uint64_t scrapes;
};

// `t`: the peer's time, carried from one measurement to the next (the endpoint's schedules are in it).
Result measure(rumor::peer::MetricsEndpoint& ep, int port, bool scrape, std::uint64_t events, std::uint64_t publishes,
               double& t) {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> scrapes{0};
  std::thread scraper;
  if (scrape)
    scraper = std::thread([&] {
      for (std::uint64_t k = 0; !stop.load(); ++k)
        if (get(port, k % 4 == 3 ? "/status.json" : "/metrics") > 0) scrapes.fetch_add(1);
    });
  auto t0 = Clock::now();
  for (std::uint64_t i = 0; i < events; ++i) ep.exchange_done(i % 2 == 0, 0.003, 203304);
  const double event_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(events);
  rumor::peer::PeerSample s;
  s.phase = "training";
  t0 = Clock::now();
  for (std::uint64_t i = 0; i < publishes; ++i) {
    t += 0.25;  // a publish every 0.25 s of the peer's time, as Runtime does
    s.t = t;
    s.clock = s.samples = static_cast<std::uint64_t>(t * 1000);
    s.bytes_sent += 200000;
    s.bytes_recv += 200000;
    s.train_seconds = t * 0.9;
    s.members.clear();
    if (ep.members_due(t))
      for (int m = 0; m < 64; ++m) s.members.push_back({fmt::format("10.0.0.{}:7000", m), "alive", i});
    ep.publish(s);
  }
  const double publish_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(publishes);
  stop = true;
  if (scraper.joinable()) scraper.join();
  return {event_ns, publish_ns, scrapes.load()};
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What --metrics-listen costs the loop thread"};
  std::uint64_t events = 2'000'000, publishes = 200'000;
  app.add_option("--events", events, "exchange_done() calls per measurement");
  app.add_option("--publishes", publishes, "publish() calls per measurement");
  CLI11_PARSE(app, argc, argv);
  rumor::peer::MetricsEndpoint ep("127.0.0.1:0", "--metrics-listen", "127.0.0.1:7000", "bench", nullptr);
  const int port = std::stoi(ep.address().substr(ep.address().rfind(':') + 1));
  get(port, "/status.json");  // somebody reads it: publish() builds a snapshot every 4th call (1 s)
  double t = 0;
  for (bool scrape : {false, true}) {
    const Result r = measure(ep, port, scrape, events, publishes, t);
    fmt::print("{:<28} exchange_done {:6.1f} ns   publish {:7.1f} ns   ({} scrapes meanwhile)\n",
               scrape ? "while scraped non-stop:" : "nobody scraping:", r.event_ns, r.publish_ns, r.scrapes);
  }
}
