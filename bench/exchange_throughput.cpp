// Exchange throughput of two Rumor peers on loopback, against a plain TCP copy of the same bytes.
//
// rumor:    two rumor::Gossip instances (core/gossip.hpp), each with its own
//           rumor::net::Transport on 127.0.0.1 and its own "compute" thread that drains a
//           mutex + condvar queue (like peer/inbox.hpp) into the Gossip, so the protocol runs
//           exactly as in the daemon: the transport's callbacks and timers only queue work.
//           Parameters are --params floats (default 25,000,000 = 100 MB), codec none. Peer A
//           starts one push-pull exchange with B at a time (max_in_flight 1), in the streamed
//           form (core/gossip.hpp): request header, then x_s; B replies with y_s as soon as it
//           has the header, mixes x_s when it has arrived and sends ExchangeAccept; A mixes on
//           reply + accept. 100 MB go each way (plus two small header-only frames, which the
//           byte count below leaves out), and the time is from A's on_step_done until both
//           compute threads are idle again.
// baseline: a plain TCP copy with POSIX sockets on loopback (TCP_NODELAY, like the transport,
//           default buffer sizes): one thread write()s the same number of bytes, another
//           read()s them into a preallocated buffer and write()s as many back, which the first
//           reads. The same bytes each way as an exchange (payload + frame + message header).
//
// The two are interleaved round trip by round trip (baseline, rumor, baseline, rumor, ...):
// --reps repetitions of --exchanges round trips of each, after --warmup untimed exchanges (the
// first ones fault in the transport's recycled receive buffers). Per repetition: GB/s of each
// (bytes moved both ways / time) and their ratio; printed: the medians, and the median of the
// per-repetition ratios.
//
// Then (unless --no-breakdown) where an exchange's time goes: a timeline of every timed
// exchange, stamped from the Env and the transport callbacks (see `Mark`), and the single-thread
// cost of each pass over the parameters that an exchange makes (snapshot copy, payload hash,
// finiteness check, distance, mix), timed on their own.
//
// Machine-readable result lines start with a key and a number, e.g.
//   rumor_gb_per_s 1.234
// (bench/README.md lists them).
#include <malloc.h>
#include <pthread.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/env.hpp"
#include "core/gossip.hpp"
#include "core/hash.hpp"
#include "core/mix.hpp"
#include "core/protocol_messages.hpp"
#include "net/frame.hpp"
#include "net/transport.hpp"

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kEpoch = Clock::now();
double now_s() { return std::chrono::duration<double>(Clock::now() - kEpoch).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void progress(const char* fmt, auto... args) {
  std::printf(fmt, args...);
  std::printf("\n");
  std::fflush(stdout);
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "bench_exchange_throughput: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

// ---- arguments ----

struct Args {
  std::size_t params = 25'000'000;
  int reps = 5;
  int exchanges = 3;  // round trips of each side per repetition
  int warmup = 2;
  bool breakdown = true;
  bool one_shot = false;  // GossipConfig::stream_exchanges = false
  double timeout_s = 60;  // one exchange, or one baseline round trip
  double chunk_mib = 4;   // GossipConfig::exchange_chunk_bytes in MiB; 0: one message per snapshot
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--params N] [--reps N] [--exchanges N] [--warmup N] [--timeout S] [--no-breakdown] [--one-shot] [--chunk-mib X]\n"
      "  --params N      floats per model (default 25000000 = 100 MB)\n"
      "  --reps N        repetitions (default 5); each is --exchanges round trips of each side\n"
      "  --exchanges N   round trips per side per repetition (default 3), interleaved\n"
      "  --warmup N      untimed exchanges and baseline round trips first (default 2)\n"
      "  --timeout S     give up if one round trip takes longer (default 60)\n"
      "  --no-breakdown  skip the timeline and the single-pass costs\n"
      "  --one-shot      exchanges in the one-shot form (request carries x_s; GossipConfig::stream_exchanges = false)\n"
      "  --chunk-mib X   snapshots travel in chunks of X MiB, each sent as soon as it is copied (default 4, the\n"
      "                  protocol's GossipConfig::exchange_chunk_bytes; at least 0.25); 0: each in one message\n",
      argv0);
}

Args parse_args(int argc, char** argv) {
  Args a;
  auto need = [&](int& i) -> const char* {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
      std::exit(2);
    }
    return argv[++i];
  };
  auto positive = [&](const char* flag, const char* v, bool allow_zero = false) {
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    if (!end || *end || x < (allow_zero ? 0 : 1)) {
      std::fprintf(stderr, "%s: %s needs a %s integer, got '%s'\n", argv[0], flag,
                   allow_zero ? "non-negative" : "positive", v);
      std::exit(2);
    }
    return x;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--params") a.params = static_cast<std::size_t>(positive("--params", need(i)));
    else if (f == "--reps") a.reps = static_cast<int>(positive("--reps", need(i)));
    else if (f == "--exchanges") a.exchanges = static_cast<int>(positive("--exchanges", need(i)));
    else if (f == "--warmup") a.warmup = static_cast<int>(positive("--warmup", need(i), true));
    else if (f == "--timeout") a.timeout_s = static_cast<double>(positive("--timeout", need(i)));
    else if (f == "--no-breakdown") a.breakdown = false;
    else if (f == "--one-shot") a.one_shot = true;
    else if (f == "--chunk-mib") {
      const char* v = need(i);
      char* end = nullptr;
      a.chunk_mib = std::strtod(v, &end);
      if (!end || *end || !(a.chunk_mib == 0 || a.chunk_mib >= 0.25) || !std::isfinite(a.chunk_mib)) {
        std::fprintf(stderr, "%s: --chunk-mib needs 0 or a size of at least 0.25 (MiB), got '%s'\n", argv[0], v);
        std::exit(2);
      }
    }
    else if (f == "-h" || f == "--help") {
      usage(argv[0]);
      std::exit(0);
    } else {
      std::fprintf(stderr, "%s: unknown flag '%s' (--help lists them)\n", argv[0], argv[i]);
      std::exit(2);
    }
  }
  return a;
}

// ---- the timeline of one exchange ----

// Instants of one exchange, in seconds since the program started (one steady clock, all threads).
enum Mark : int {
  kAStart,         // A's thread: before on_step_done (which sends the request, then x_s)
  kAHeaderSent,    // A: Env::send(ExchangeRequest) returned (the header, no payload)
  kAPayloadSend,   // A: Env::send(ExchangePayload) entered (x_s's first chunk copied and hashed)
  kAPayloadSent,   // A: Transport::send(ExchangePayload) returned (x_s's last chunk)
  kBHeaderRecv,    // B's I/O thread: the request header received (on_message)
  kBReplySend,     // B: Env::send(ExchangeReply) entered (header checked, y_s's first chunk copied and hashed)
  kBPayloadRecv,   // B's I/O thread: the whole of x_s (its last chunk) received and checksummed
  kBPayloadHandle, // B's thread: Gossip::on_message(ExchangePayload) called (the last chunk)
  kBAcceptSend,    // B: Env::send(ExchangeAccept) entered (x_s checked; B mixes after sending it)
  kBDone,          // B: ExchangeDone event (x_s mixed, with the distance)
  kAReplyRecv,     // A's I/O thread: the whole reply received and checksummed
  kAAcceptRecv,    // A's I/O thread: B's ExchangeAccept received
  kADone,          // A: ExchangeDone event (y_s checked, distance, mixed)
  kALastIn,        // (derived) the later of kAReplyRecv and kAAcceptRecv: A may mix from here
  kMarks
};

struct Timeline {
  std::mutex mu;
  std::array<double, kMarks> t{};
  void mark(Mark m) {
    const double v = now_s();
    std::lock_guard lk(mu);
    t[m] = v;
  }
  // For a snapshot sent in chunks: the first chunk's instant (mark() keeps the last).
  void mark_first(Mark m) {
    const double v = now_s();
    std::lock_guard lk(mu);
    if (std::isnan(t[m])) t[m] = v;
  }
  std::array<double, kMarks> get() {
    std::lock_guard lk(mu);
    return t;
  }
  void clear() {
    std::lock_guard lk(mu);
    t.fill(NAN);
  }
};

// ---- one peer: transport, queue, Env, Gossip, compute thread ----

struct Item {
  enum class Kind { Message, SendFailed, Rejected, Timer, Step, Sync } kind;
  rumor::PeerId peer;
  rumor::Message msg;
  std::string reason;
  std::uint64_t timer = 0;
};

class Queue {
 public:
  void push(Item it) {
    {
      std::lock_guard lk(mu_);
      q_.push_back(std::move(it));
    }
    cv_.notify_one();
  }
  std::deque<Item> wait_take(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return !q_.empty(); });
    std::deque<Item> out;
    out.swap(q_);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> q_;
};

struct Shared {
  Timeline tl;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t done = 0;  // A's completed exchanges
  std::uint64_t synced[2] = {0, 0};  // Sync items handled by A, B
  bool joined = false;
  std::string failure;     // the first ExchangeFailed / Rejected, if any
  void signal(const std::function<void()>& f) {
    {
      std::lock_guard lk(mu);
      f();
    }
    cv.notify_all();
  }
};


class Peer;

class BenchEnv final : public rumor::Env {
 public:
  BenchEnv(Peer& p, std::uint64_t seed) : p_(p), rng_(seed) {}
  double now() const override { return now_s(); }
  void send(const rumor::PeerId& to, rumor::Message msg) override;
  void set_timer(double delay_s, std::uint64_t id) override;
  void disconnect(const rumor::PeerId& peer) override;
  rumor::Rng& rng() override { return rng_; }
  void event(const rumor::ProtocolEvent& e) override;

 private:
  Peer& p_;
  rumor::Rng rng_;
};

class Peer {
 public:
  Peer(bool initiator, std::size_t n, float base, Shared& sh, const std::string& fingerprint, bool stream, double chunk_mib)
      : initiator_(initiator), sh_(sh), params_(n), env_(*this, initiator ? 11 : 22) {
    for (std::size_t i = 0; i < n; ++i) params_[i] = base + 1e-3f * static_cast<float>(i % 1000);
    rumor::net::TransportConfig cfg;
    cfg.listen_host = "127.0.0.1";
    cfg.listen_port = 0;
    cfg.fingerprint = fingerprint;
    cfg.max_payload_bytes = n * sizeof(float) + (1u << 20);  // as the daemon sets it
    rumor::net::TransportEvents ev;
    ev.on_message = [this](const rumor::PeerId& from, rumor::Message&& m) {
      using T = rumor::MsgType;
      if (m.type == T::ExchangeRequest) sh_.tl.mark(kBHeaderRecv);
      if (m.type == T::ExchangePayload) sh_.tl.mark(kBPayloadRecv);
      if (m.type == T::ExchangeReply) sh_.tl.mark(kAReplyRecv);
      if (m.type == T::ExchangeAccept) sh_.tl.mark(kAAcceptRecv);
      q_.push({Item::Kind::Message, from, std::move(m), {}, 0});
    };
    ev.on_send_failed = [this](const rumor::PeerId& p, const std::string& why) {
      q_.push({Item::Kind::SendFailed, p, {}, why, 0});
    };
    ev.on_rejected = [this](const rumor::PeerId& p, const std::string& why) {
      q_.push({Item::Kind::Rejected, p, {}, why, 0});
    };
    auto log = std::make_shared<spdlog::logger>(initiator ? "A" : "B", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    log->set_level(spdlog::level::warn);
    transport_ = std::make_unique<rumor::net::Transport>(cfg, ev, log);
    transport_->start();
    rumor::GossipConfig gc;
    gc.local_steps = 1;
    gc.max_in_flight = 1;  // one exchange at a time: a clean round trip to time
    gc.stream_exchanges = stream;
    gc.exchange_chunk_bytes = chunk_mib > 0 ? static_cast<std::size_t>(chunk_mib * (1 << 20)) : SIZE_MAX;
    gc.codec = rumor::PayloadCodec::None;
    gc.exchange_timeout_s = 120;
    gossip_ = std::make_unique<rumor::Gossip>(env_, gc, rumor::MemberDigest{transport_->local_id(), 1, rumor::MemberState::Alive, 0},
                                              fingerprint, std::span<float>(params_));
  }
  ~Peer() { stop(); }

  rumor::PeerId id() const { return transport_->local_id(); }
  void start(std::vector<rumor::PeerId> seeds) {
    q_.push({Item::Kind::Step, {}, {}, "start", 0});  // first item: start the Gossip on its thread
    seeds_ = std::move(seeds);
    thread_ = std::thread([this] { run(); });
  }
  void step() { q_.push({Item::Kind::Step, {}, {}, {}, 0}); }
  // Everything queued before this has been handled (and its buffers freed) once synced[] moves.
  void sync() { q_.push({Item::Kind::Sync, {}, {}, {}, 0}); }
  void stop() {
    if (thread_.joinable()) {
      stop_ = true;
      q_.push({Item::Kind::Timer, {}, {}, {}, 0});
      thread_.join();
    }
    if (transport_) transport_->stop();
  }
  rumor::net::Transport& transport() { return *transport_; }
  Queue& queue() { return q_; }
  Shared& shared() { return sh_; }
  bool initiator() const { return initiator_; }
  const rumor::GossipStats& stats() const { return gossip_->stats(); }  // after stop()
  // CPU seconds the compute thread has used so far (it runs the protocol only: snapshots,
  // checks, mixes, the small messages).
  double cpu_s() const {
    clockid_t id;
    timespec ts{};
    if (!have_cpu_clock_ || pthread_getcpuclockid(cpu_clock_, &id) != 0 || clock_gettime(id, &ts) != 0) return NAN;
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }

 private:
  void run() {
    cpu_clock_ = pthread_self();
    have_cpu_clock_ = true;
    while (!stop_) {
      for (Item& it : q_.wait_take(std::chrono::milliseconds(100))) {
        if (stop_) break;
        switch (it.kind) {
          case Item::Kind::Message:
            if (it.msg.type == rumor::MsgType::ExchangePayload) sh_.tl.mark(kBPayloadHandle);
            gossip_->on_message(it.peer, it.msg);
            break;
          case Item::Kind::SendFailed: gossip_->on_send_failed(it.peer, it.reason); break;
          case Item::Kind::Rejected:
            sh_.signal([&] { sh_.failure = "transport rejected input from " + it.peer + ": " + it.reason; });
            break;
          case Item::Kind::Timer:
            if (!stop_) gossip_->on_timer(it.timer);
            break;
          case Item::Kind::Sync: sh_.signal([&] { ++sh_.synced[initiator_ ? 0 : 1]; }); break;
          case Item::Kind::Step:
            if (it.reason == "start") {
              gossip_->start(seeds_);
            } else {
              sh_.tl.mark(kAStart);
              ++clock_;
              gossip_->on_step_done(clock_, clock_ * 64);
            }
            break;
        }
      }
    }
  }

  bool initiator_;
  Shared& sh_;
  std::vector<float> params_;
  BenchEnv env_;
  std::unique_ptr<rumor::net::Transport> transport_;
  std::unique_ptr<rumor::Gossip> gossip_;
  Queue q_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::vector<rumor::PeerId> seeds_;
  std::uint64_t clock_ = 0;
  pthread_t cpu_clock_{};
  std::atomic<bool> have_cpu_clock_{false};
};

void BenchEnv::send(const rumor::PeerId& to, rumor::Message msg) {
  using T = rumor::MsgType;
  const T type = msg.type;
  Timeline& tl = p_.shared().tl;
  if (type == T::ExchangePayload) tl.mark_first(kAPayloadSend);
  if (type == T::ExchangeReply) tl.mark_first(kBReplySend);
  if (type == T::ExchangeAccept) tl.mark(kBAcceptSend);
  p_.transport().send(to, std::move(msg));
  if (type == T::ExchangeRequest) tl.mark(kAHeaderSent);
  if (type == T::ExchangePayload) tl.mark(kAPayloadSent);
}

void BenchEnv::set_timer(double delay_s, std::uint64_t id) {
  Queue* q = &p_.queue();
  p_.transport().post_after(delay_s, [q, id] { q->push({Item::Kind::Timer, {}, {}, {}, id}); });
}

void BenchEnv::disconnect(const rumor::PeerId& peer) { p_.transport().disconnect(peer); }

void BenchEnv::event(const rumor::ProtocolEvent& e) {
  using K = rumor::ProtocolEvent::Kind;
  Shared& sh = p_.shared();
  switch (e.kind) {
    case K::ExchangeDone:
      sh.tl.mark(p_.initiator() ? kADone : kBDone);
      if (p_.initiator()) sh.signal([&] { ++sh.done; });
      break;
    case K::Joined: sh.signal([&] { sh.joined = true; }); break;
    case K::ExchangeFailed:
    case K::Rejected:
      sh.signal([&] {
        if (sh.failure.empty()) sh.failure = std::string(rumor::event_kind_name(e.kind)) + " " + e.peer + ": " + e.reason;
      });
      break;
    default: break;
  }
}

// ---- the plain TCP baseline ----

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die(std::string("baseline write: ") + std::strerror(errno));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void read_all(int fd, std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die(std::string("baseline read: ") + (r == 0 ? "end of file" : std::strerror(errno)));
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

class Baseline {
 public:
  explicit Baseline(std::size_t n) : n_(n), out_(n), in_(n), srv_buf_(n) {
    for (std::size_t i = 0; i < n; ++i) out_[i] = static_cast<std::uint8_t>(i * 131);
    std::memset(in_.data(), 0, n);
    std::memset(srv_buf_.data(), 0, n);  // fault everything in: preallocated buffers
    const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (ls < 0 || ::bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(ls, 1) != 0 ||
        ::getsockname(ls, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      die(std::string("baseline listen: ") + std::strerror(errno));
    cli_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (cli_ < 0 || ::connect(cli_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      die(std::string("baseline connect: ") + std::strerror(errno));
    srv_ = ::accept(ls, nullptr, nullptr);
    if (srv_ < 0) die(std::string("baseline accept: ") + std::strerror(errno));
    ::close(ls);
    set_nodelay(cli_);
    set_nodelay(srv_);
    server_ = std::thread([this] {
      for (;;) {
        std::uint8_t go = 0;
        read_all(srv_, &go, 1);
        if (go == 0) return;
        read_all(srv_, srv_buf_.data(), n_);
        server_got_.store(now_s());
        write_all(srv_, srv_buf_.data(), n_);
      }
    });
  }
  ~Baseline() {
    const std::uint8_t stop = 0;
    write_all(cli_, &stop, 1);
    server_.join();
    ::close(cli_);
    ::close(srv_);
  }
  // One round trip; returns its seconds; `there` = the time until the server had it all.
  double round_trip(double& there) {
    const std::uint8_t go = 1;
    write_all(cli_, &go, 1);
    const double t0 = now_s();
    write_all(cli_, out_.data(), n_);
    read_all(cli_, in_.data(), n_);
    const double t1 = now_s();
    there = server_got_.load() - t0;
    return t1 - t0;
  }

 private:
  std::size_t n_;
  std::vector<std::uint8_t> out_, in_, srv_buf_;
  int cli_ = -1, srv_ = -1;
  std::thread server_;
  std::atomic<double> server_got_{0};
};

// ---- single-pass costs ----

// CPU seconds of the calling thread: on a shared machine the wall time of a pass includes the
// time other processes held the core; its CPU time is what the pass itself costs.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <class F>
double time_median(int reps, F&& f) {
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    const double t0 = thread_cpu_s();
    f();
    v.push_back(thread_cpu_s() - t0);
  }
  return median(v);
}

volatile double g_sink = 0;  // keeps the optimiser from dropping what is timed

// ---- what-ifs: the same work done differently (NOT what Rumor does; for the breakdown) ----

// Finiteness by the exponent bits: an integer OR-reduction, which the compiler vectorises (a
// float sum must be added in order, one add latency per element, unless -ffast-math).
bool alt_all_finite(std::span<const float> v) {
  const auto* w = reinterpret_cast<const std::uint32_t*>(v.data());
  std::uint32_t bad = 0;
  for (std::size_t i = 0, n = v.size(); i < n; ++i) bad |= (w[i] & 0x7f800000u) == 0x7f800000u;
  return bad == 0;
}

// relative_distance with 8 independent accumulators per sum (same double arithmetic, summed in
// another order), so the adds overlap instead of waiting on each other.
double alt_relative_distance(std::span<const float> a, std::span<const float> b) {
  constexpr std::size_t L = 8;
  double d[L] = {}, na[L] = {}, nb[L] = {};
  const std::size_t n = a.size();
  std::size_t i = 0;
  for (; i + L <= n; i += L)
    for (std::size_t k = 0; k < L; ++k) {
      const double x = a[i + k], y = b[i + k];
      d[k] += (x - y) * (x - y);
      na[k] += x * x;
      nb[k] += y * y;
    }
  for (; i < n; ++i) {
    const double x = a[i], y = b[i];
    d[0] += (x - y) * (x - y);
    na[0] += x * x;
    nb[0] += y * y;
  }
  double sd = 0, sa = 0, sb = 0;
  for (std::size_t k = 0; k < L; ++k) sd += d[k], sa += na[k], sb += nb[k];
  return std::sqrt(sd) / std::max({std::sqrt(sa), std::sqrt(sb), 1e-30});
}

// The initiator's three passes over the reply (all_finite, relative_distance, mix_into) as one
// pass over memory: block by block (24 KiB of the three arrays, in L1), the vectorised check and
// distance of the block, then its mix.
double alt_fused_check_distance_mix(std::span<float> x, std::span<const float> m, std::span<const float> snap,
                                    float w, bool& finite) {
  constexpr std::size_t L = 8, B = 2048;
  double d[L] = {}, na[L] = {}, nb[L] = {};
  std::uint32_t bad = 0;
  const auto* mw = reinterpret_cast<const std::uint32_t*>(m.data());
  const std::size_t n = x.size();
  for (std::size_t b0 = 0; b0 < n; b0 += B) {
    const std::size_t b1 = std::min(n, b0 + B);
    for (std::size_t i = b0; i < b1; ++i) bad |= (mw[i] & 0x7f800000u) == 0x7f800000u;
    std::size_t i = b0;
    for (; i + L <= b1; i += L)
      for (std::size_t k = 0; k < L; ++k) {
        const double p = snap[i + k], q = m[i + k];
        d[k] += (p - q) * (p - q);
        na[k] += p * p;
        nb[k] += q * q;
      }
    for (; i < b1; ++i) {
      const double p = snap[i], q = m[i];
      d[0] += (p - q) * (p - q);
      na[0] += p * p;
      nb[0] += q * q;
    }
    float* __restrict px = x.data();
    const float* __restrict pm = m.data();
    const float* __restrict ps = snap.data();
    for (std::size_t j = b0; j < b1; ++j) px[j] += w * (pm[j] - ps[j]);
  }
  finite = bad == 0;
  double sd = 0, sa = 0, sb = 0;
  for (std::size_t k = 0; k < L; ++k) sd += d[k], sa += na[k], sb += nb[k];
  return std::sqrt(sd) / std::max({std::sqrt(sa), std::sqrt(sb), 1e-30});
}

}  // namespace

int main(int argc, char** argv) {
  // As rumor-peer does (peer/main.cpp): big buffers come from the heap, not fresh mmaps.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  const Args args = parse_args(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  const std::size_t n = args.params;
  const std::string fingerprint = "bench/p" + std::to_string(n) + "/f32";

  // The bytes an exchange moves each way: frame + message header + payload (the header is
  // measured from a message with the same two-member view, so the baseline copies as many).
  rumor::ExchangeMsg probe;
  probe.param_count = n;
  probe.view = {rumor::MemberDigest{"127.0.0.1:65535", 1, rumor::MemberState::Alive, 0},
                rumor::MemberDigest{"127.0.0.1:65534", 1, rumor::MemberState::Alive, 0}};
  const std::size_t header_bytes = rumor::make_message(rumor::MsgType::ExchangeRequest, probe, nullptr).header.size();
  const std::size_t one_way = rumor::net::kFrameHeaderSize + header_bytes + n * sizeof(float);
  const double moved = 2.0 * static_cast<double>(one_way);  // per round trip, both ways

  const unsigned cores = std::thread::hardware_concurrency();
  double load[3] = {0, 0, 0};
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = NAN;
    std::fclose(f);
  }
  progress("# %zu float parameters per model (%.1f MB); %zu bytes each way per exchange (frame %zu + header %zu + payload)",
           n, 1e-6 * static_cast<double>(n * sizeof(float)), one_way, rumor::net::kFrameHeaderSize, header_bytes);
  char chunking[96] = "in one message each (--chunk-mib 0)";
  if (args.chunk_mib > 0) std::snprintf(chunking, sizeof chunking, "in chunks of %g MiB (--chunk-mib)", args.chunk_mib);
  progress("# exchanges in the %s form; snapshots %s", args.one_shot ? "one-shot (--one-shot)" : "streamed", chunking);
  progress("# %d reps x %d round trips of each side, interleaved (baseline, rumor, ...), after %d warm-up; %u cores, load %.2f",
           args.reps, args.exchanges, args.warmup, cores, load[0]);

  progress("== setting up: two peers (Gossip + Transport on 127.0.0.1) and the TCP baseline");
  Shared sh;
  sh.tl.clear();
  Peer b(false, n, 0.5f, sh, fingerprint, !args.one_shot, args.chunk_mib);
  Peer a(true, n, -0.5f, sh, fingerprint, !args.one_shot, args.chunk_mib);
  b.start({});
  a.start({b.id()});
  {
    std::unique_lock lk(sh.mu);
    if (!sh.cv.wait_for(lk, std::chrono::seconds(10), [&] { return sh.joined || !sh.failure.empty(); }) || !sh.joined)
      die("peer A did not join B within 10 s" + (sh.failure.empty() ? std::string() : ": " + sh.failure));
  }
  progress("   A %s joined B %s", a.id().c_str(), b.id().c_str());
  Baseline base(one_way);

  std::vector<double> tail;  // after A mixed: until both threads are idle (frees, B's mix)
  std::vector<double> compute_cpu;  // CPU seconds of both compute threads per timed exchange
  auto exchange = [&](std::array<double, kMarks>* timeline) {
    std::uint64_t want;
    {
      std::lock_guard lk(sh.mu);
      want = sh.done + 1;
    }
    sh.tl.clear();
    const double cpu0 = a.cpu_s() + b.cpu_s();
    const double t0 = now_s();
    a.step();
    std::unique_lock lk(sh.mu);
    if (!sh.cv.wait_for(lk, std::chrono::duration<double>(args.timeout_s),
                        [&] { return sh.done >= want || !sh.failure.empty(); }))
      die("an exchange took more than " + std::to_string(args.timeout_s) + " s");
    if (!sh.failure.empty()) die("exchange failed: " + sh.failure);
    lk.unlock();
    // The exchange is over when both compute threads have finished with it: B mixes after
    // sending its reply, and each side frees its 100 MB snapshot after mixing. A Sync item
    // queued behind that work marks the end (the time includes it: the daemon pays it too).
    std::uint64_t sa, sb;
    {
      std::lock_guard g(sh.mu);
      sa = sh.synced[0] + 1;
      sb = sh.synced[1] + 1;
    }
    for (int i = 0; i < 100000; ++i) {  // B's ExchangeDone comes after its reply went out
      if (!std::isnan(sh.tl.get()[kBDone])) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    a.sync();
    b.sync();
    lk.lock();
    if (!sh.cv.wait_for(lk, std::chrono::duration<double>(args.timeout_s),
                        [&] { return sh.synced[0] >= sa && sh.synced[1] >= sb; }))
      die("the peers did not become idle after an exchange");
    const double t_end = now_s(), dt = t_end - t0;
    lk.unlock();
    if (timeline) compute_cpu.push_back(a.cpu_s() + b.cpu_s() - cpu0);
    tail.push_back(t_end - sh.tl.get()[kADone]);
    if (timeline) *timeline = sh.tl.get();
    return dt;
  };

  for (int i = 0; i < args.warmup; ++i) {
    double there = 0;
    const double tb = base.round_trip(there);
    const double tr = exchange(nullptr);
    progress("   warm-up %d: baseline %.3f s (%.2f GB/s), rumor %.3f s (%.2f GB/s)", i + 1, tb, 1e-9 * moved / tb, tr,
             1e-9 * moved / tr);
  }

  std::vector<double> gb_base, gb_rumor, ratios, base_there, base_back, base_rt, rumor_rt;
  std::vector<std::array<double, kMarks>> timelines;
  // CPU of the whole process (all threads, user + system: the kernel's loopback copies
  // included) per round trip, and the share of the cores it kept busy.
  std::vector<double> base_cpu, rumor_cpu, base_busy, rumor_busy;
  const auto process_cpu = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  for (int r = 0; r < args.reps; ++r) {
    double sb = 0, sr = 0;
    for (int i = 0; i < args.exchanges; ++i) {
      double there = 0;
      const double c0 = process_cpu();
      const double tb = base.round_trip(there);
      const double c1 = process_cpu();
      base_cpu.push_back(c1 - c0);
      base_busy.push_back((c1 - c0) / (tb * cores));
      sb += tb;
      base_rt.push_back(tb);
      base_there.push_back(there);
      base_back.push_back(tb - there);
      std::array<double, kMarks> tl{};
      const double c2 = process_cpu();
      const double tr = exchange(&tl);
      const double c3 = process_cpu();
      rumor_cpu.push_back(c3 - c2);
      rumor_busy.push_back((c3 - c2) / (tr * cores));
      sr += tr;
      rumor_rt.push_back(tr);
      timelines.push_back(tl);
    }
    const double gb = 1e-9 * moved * args.exchanges / sb, gr = 1e-9 * moved * args.exchanges / sr;
    gb_base.push_back(gb);
    gb_rumor.push_back(gr);
    ratios.push_back(gr / gb);
    progress("   rep %d/%d: baseline %.2f GB/s (%.3f s per round trip), rumor %.2f GB/s (%.3f s per exchange), ratio %.3f",
             r + 1, args.reps, gb, sb / args.exchanges, gr, sr / args.exchanges, gr / gb);
  }
  progress("   process CPU per round trip (all threads, user + system; medians): baseline %.1f ms (%.0f%% of %u cores), "
           "rumor %.1f ms (%.0f%%)",
           1e3 * median(base_cpu), 100 * median(base_busy), cores, 1e3 * median(rumor_cpu), 100 * median(rumor_busy));
  std::printf("baseline_process_cpu_ms %.2f\nrumor_process_cpu_ms %.2f\nbaseline_cores_busy %.3f\nrumor_cores_busy %.3f\n",
              1e3 * median(base_cpu), 1e3 * median(rumor_cpu), median(base_busy), median(rumor_busy));
  const double ratio = median(ratios);
  const double rmin = *std::min_element(ratios.begin(), ratios.end());
  const double rmax = *std::max_element(ratios.begin(), ratios.end());

  // ---- breakdown ----
  struct Part {
    const char* key;
    const char* what;
    Mark from, to;
  };
  const Part parts[] = {
      {"a_header", "A: on_step_done -> request header handed to the transport", kAStart, kAHeaderSent},
      {"a_snapshot", "A: copy + hash x_s's first chunk into a pooled buffer (before x_s can leave)", kAHeaderSent, kAPayloadSend},
      {"a_payload_send", "A: first chunk handed over -> last chunk copied, hashed, handed over", kAPayloadSend, kAPayloadSent},
      {"b_header_to_reply", "B: header received -> y_s copied + hashed, reply sent", kBHeaderRecv, kBReplySend},
      {"request_payload_wire", "x_s on the wire (write, read, receive hash)", kAPayloadSend, kBPayloadRecv},
      {"reply_wire", "y_s on the wire (write, read, receive hash)", kBReplySend, kAReplyRecv},
      {"b_queue", "B: x_s received -> its handler starts", kBPayloadRecv, kBPayloadHandle},
      {"b_check_to_accept", "B: x_s handler -> accept sent (finiteness flagged on receipt, robust screen)", kBPayloadHandle, kBAcceptSend},
      {"b_accept_to_a", "B's accept sent -> A has it", kBAcceptSend, kAAcceptRecv},
      {"b_mix", "B: accept sent -> x_s mixed with the distance (off the critical path)", kBAcceptSend, kBDone},
      {"b_in_to_a_ready", "x_s all in at B -> A has both reply and accept", kBPayloadRecv, kALastIn},
      {"a_last_to_done", "A: last of (reply, accept) in -> mixed (queue, mix/distance)", kALastIn, kADone},
      {"total", "A: on_step_done -> reply mixed", kAStart, kADone},
  };
  std::vector<std::pair<const Part*, double>> measured;
  if (args.breakdown) {
    progress("== breakdown: timeline of the %zu timed exchanges (medians, ms)%s", timelines.size(),
             args.one_shot ? "; --one-shot: the marks of the streamed form that do not occur read nan" : "");
    for (const Part& p : parts) {
      std::vector<double> v;
      for (auto tl : timelines) {
        // A mixes once it has both the reply and the accept, whichever came last.
        tl[kALastIn] = std::max(tl[kAAcceptRecv], tl[kAReplyRecv]);
        v.push_back(1e3 * (tl[p.to] - tl[p.from]));
      }
      const double m = median(v);
      measured.emplace_back(&p, m);
      progress("   %-20s %8.1f   %s", p.key, m, p.what);
    }
    progress("   %-20s %8.1f   after A mixed: until both threads are idle (B's mix, freeing snapshots)", "tail",
             1e3 * median(tail));
    progress("   %-20s %8.1f   = the measured exchange", "exchange", 1e3 * median(rumor_rt));
    progress("   %-20s %8.1f   plain TCP: client write -> server has it all", "baseline_there", 1e3 * median(base_there));
    progress("   %-20s %8.1f   plain TCP: server write -> client has it all", "baseline_back", 1e3 * median(base_back));
    progress("   %-20s %8.1f   plain TCP round trip", "baseline_total", 1e3 * median(base_rt));
    {
      auto part = [&](const char* key) {
        for (const auto& [p, m] : measured)
          if (std::strcmp(p->key, key) == 0) return m;
        return static_cast<double>(NAN);
      };
      const double before = part("a_header") + part("a_snapshot"), wire = part("request_payload_wire"),
                   after = part("b_in_to_a_ready"), mix = part("a_last_to_done");
      progress("   critical path (medians, ms): A before x_s can leave %.1f + x_s on the wire %.1f + x_s in at B -> A may "
               "mix %.1f + A's mix %.1f = %.1f (total %.1f)",
               before, wire, after, mix, before + wire + after + mix, part("total"));
      std::printf("critical_before_wire_ms %.2f\ncritical_wire_ms %.2f\ncritical_after_wire_ms %.2f\ncritical_a_mix_ms %.2f\n",
                  before, wire, after, mix);
    }

    progress("== breakdown: one pass over %zu floats on one thread, alone (median of 5, CPU ms of the thread)", n);
    std::vector<float> x(n), y(n), s(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = 0.25f + 1e-3f * static_cast<float>(i % 997);
      y[i] = 0.5f - 1e-3f * static_cast<float>(i % 991);
      s[i] = x[i];
    }
    const std::span<const std::uint8_t> xb(reinterpret_cast<const std::uint8_t*>(x.data()), n * sizeof(float));
    std::vector<float> pre(n, 0.0f);
    struct Pass {
      const char* key;
      const char* what;
      double ms;
    };
    std::vector<Pass> passes;
    auto pass = [&](const char* key, const char* what, auto&& f) {
      passes.push_back({key, what, 1e3 * time_median(5, f)});
      progress("   %-20s %8.1f   %s", key, passes.back().ms, what);
    };
    pass("copy_and_hash", "rumor::copy_and_hash into a reused buffer (the exchange's snapshot, with its digest)", [&] {
      g_sink = g_sink + static_cast<double>(rumor::copy_and_hash(xb, reinterpret_cast<std::uint8_t*>(pre.data())));
    });
    pass("encode_params", "rumor::encode_params: new zeroed 100 MB Bytes + memcpy (no longer on the exchange path)", [&] {
      auto p = rumor::encode_params(x);
      g_sink = g_sink + (*p)[n];
    });
    pass("alloc_zeroed", "std::make_shared<Bytes>(n) alone: page faults + zeroing", [&] {
      auto p = std::make_shared<rumor::Bytes>(n * sizeof(float));
      g_sink = g_sink + (*p)[n];
    });
    pass("memcpy_prealloc", "memcpy into a buffer already faulted in", [&] {
      std::memcpy(pre.data(), x.data(), n * sizeof(float));
      g_sink = g_sink + pre[n / 2];
    });
    pass("hash64", "rumor::net::hash64 of the payload (frame checksum)", [&] {
      g_sink = g_sink + static_cast<double>(rumor::net::hash64(xb));
    });
    pass("all_finite", "rumor::all_finite alone (no longer a pass of its own: see recv_check)", [&] { g_sink = g_sink + rumor::all_finite(x); });
    // What the receiving I/O thread does with each chunk a read lands (net::FrameDecoder::commit):
    // the kernel's copy into the payload buffer (here a memcpy: the wire's cost, in the
    // baseline too), then the hash and the float32 check while the chunk is in cache.
    constexpr std::size_t kStep = 256u << 10;
    auto* preb = reinterpret_cast<std::uint8_t*>(pre.data());
    pass("recv_copy", "reference: memcpy in 256 KiB chunks (what the kernel's copy into the payload buffer costs)", [&] {
      for (std::size_t off = 0, total = xb.size(); off < total; off += kStep)
        std::memcpy(preb + off, xb.data() + off, std::min(kStep, total - off));
      g_sink = g_sink + pre[n / 3];
    });
    pass("recv_copy_check", "memcpy each 256 KiB chunk, then hash + finiteness check it in cache (the decoder's pass)", [&] {
      rumor::net::FrameHasher h;
      bool finite = true;
      for (std::size_t off = 0, total = xb.size(); off < total; off += kStep) {
        const std::size_t len = std::min(kStep, total - off);
        std::memcpy(preb + off, xb.data() + off, len);
        h.update({preb + off, len});
        finite = finite && rumor::all_finite({reinterpret_cast<const float*>(preb + off), len / 4});
      }
      g_sink = g_sink + static_cast<double>(h.digest()) + finite;
    });
    pass("relative_distance", "rumor::relative_distance (consensus gauge)", [&] {
      g_sink = g_sink + rumor::relative_distance(x, y);
    });
    pass("mix_into", "rumor::mix_into x += w (m - x_s)", [&] { rumor::mix_into(s, y, x, 0.5); });
    pass("mix_with_distance", "rumor::mix_into_with_distance: mix + distance in one pass (the exchange's)", [&] {
      g_sink = g_sink + rumor::mix_into_with_distance(s, y, x, 0.5);
    });
    pass("read_sum_u64", "reference: a plain integer read pass (memory bandwidth)", [&] {
      const auto* w = reinterpret_cast<const std::uint64_t*>(x.data());
      std::uint64_t acc = 0;
      for (std::size_t i = 0, m = n * sizeof(float) / 8; i < m; ++i) acc += w[i];
      g_sink = g_sink + static_cast<double>(acc);
    });
    progress("== what-ifs (the same work done differently; not what Rumor does), ms");
    pass("whatif_copy_hash", "snapshot copy into a reused buffer, hashed 256 KiB chunk by chunk while in cache", [&] {
      rumor::net::FrameHasher h;
      constexpr std::size_t C = 256u << 10;
      const auto* src = reinterpret_cast<const std::uint8_t*>(x.data());
      auto* dst = reinterpret_cast<std::uint8_t*>(pre.data());
      for (std::size_t off = 0, total = n * sizeof(float); off < total; off += C) {
        const std::size_t len = std::min(C, total - off);
        std::memcpy(dst + off, src + off, len);
        h.update({dst + off, len});
      }
      g_sink = g_sink + static_cast<double>(h.digest());
    });
    pass("whatif_all_finite", "all_finite on the exponent bits (integer OR, vectorised)", [&] {
      g_sink = g_sink + alt_all_finite(x);
    });
    pass("whatif_distance", "relative_distance with 8 accumulators per sum", [&] {
      g_sink = g_sink + alt_relative_distance(x, y);
    });
    pass("whatif_fused", "all_finite + relative_distance + mix_into in one pass", [&] {
      bool fin = false;
      g_sink = g_sink + alt_fused_check_distance_mix(s, y, x, 0.5f, fin) + fin;
    });
    // Sanity: the what-ifs compute the same answers.
    {
      bool fin = false;
      std::vector<float> s2 = s, s3 = s;
      rumor::mix_into(s2, y, x, 0.5);
      const double d1 = rumor::relative_distance(x, y);
      const double d2 = alt_fused_check_distance_mix(s3, y, x, 0.5f, fin);
      if (!fin || std::abs(d1 - d2) > 1e-9 * std::max(1.0, d1) || std::abs(alt_relative_distance(x, y) - d1) > 1e-9 * std::max(1.0, d1) ||
          !alt_all_finite(x) || s2 != s3)
        die("a what-if computes something else than the real pass");
      std::vector<float> bad(x.begin(), x.begin() + 1000);
      bad[517] = NAN;
      if (alt_all_finite(bad) || rumor::all_finite(bad)) die("a finiteness check missed a NaN");
    }
    auto cost = [&](const char* key) {
      for (const auto& p : passes)
        if (std::strcmp(p.key, key) == 0) return p.ms;
      return 0.0;
    };
    // The compute on an exchange's critical path, by the passes above: each side snapshots,
    // hashes its send and checks the other's payload; A then computes the distance and mixes.
    // (B's distance + mix overlaps the reply's transfer, but competes for the cores.) The
    // receive-side hash runs on the I/O thread chunk by chunk, inside the wire time.
    // Each side: one snapshot copied and hashed, the other's payload hashed as it lands (on the
    // I/O thread, inside the wire time), checked for finiteness, and mixed with the distance.
    // Now: the receive check is the in-cache hash + float32 check of each chunk (recv_copy_check
    // minus the copy it rides on); no separate hash or all_finite pass remains.
    const double recv_own = std::max(0.0, cost("recv_copy_check") - cost("recv_copy"));
    const double compute = 2 * cost("copy_and_hash") + 2 * recv_own + 2 * cost("mix_with_distance");
    const double per100 = 1e8 / static_cast<double>(n * sizeof(float));  // scale to 100 MB each way
    const double own = compute * per100;
    const double cpu_measured = 1e3 * median(compute_cpu) * per100;
    const double rumor_ms = 1e3 * median(rumor_rt), base_ms = 1e3 * median(base_rt);
    const double memcpy_ms = cost("memcpy_prealloc");
    progress("   the exchange's own CPU, both sides, by these passes: 2 x copy_and_hash + 2 x (recv_copy_check - recv_copy) + "
             "2 x mix_with_distance = %.1f ms, %.1f ms per 100 MB each way = %.2f x memcpy_prealloc (%.1f ms); "
             "measured on the two compute threads during the timed exchanges (median): %.1f ms per 100 MB each way "
             "(their snapshots and mixes; the receive check runs on the I/O threads); beside a %.1f ms exchange "
             "(plain TCP round trip %.1f ms, itself keeping both cores busy)",
             compute, own, own / memcpy_ms, memcpy_ms, cpu_measured, rumor_ms, base_ms);
    progress("   (the same passes as before this change: 2 x copy_and_hash + 2 x hash64 + 2 x all_finite + 2 x mix_with_distance "
             "= %.1f ms)",
             2 * cost("copy_and_hash") + 2 * cost("hash64") + 2 * cost("all_finite") + 2 * cost("mix_with_distance"));
    std::printf("breakdown_compute_ms %.2f\n", compute);
    std::printf("own_cpu_ms_per_100mb %.2f\n", own);
    std::printf("own_cpu_over_memcpy %.3f\n", own / memcpy_ms);
    std::printf("compute_threads_cpu_ms_per_100mb %.2f\n", cpu_measured);
    std::printf("target_own_cpu_30ms %s\n", own <= 30 ? "met" : "NOT_MET");
    std::printf("timeline_tail_ms %.2f\n", 1e3 * median(tail));
    for (const auto& p : passes) std::printf("pass_%s_ms %.2f\n", p.key, p.ms);
    for (const auto& [p, m] : measured) std::printf("timeline_%s_ms %.2f\n", p->key, m);
  }

  a.stop();
  b.stop();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("bytes_each_way %zu\n", one_way);
  std::printf("baseline_gb_per_s %.3f\n", median(gb_base));
  std::printf("rumor_gb_per_s %.3f\n", median(gb_rumor));
  std::printf("baseline_round_trip_s %.4f\n", median(base_rt));
  std::printf("rumor_exchange_s %.4f\n", median(rumor_rt));
  std::printf("ratio %.3f\n", ratio);
  std::printf("ratio_min %.3f\n", rmin);
  std::printf("ratio_max %.3f\n", rmax);
  std::printf("exchanges_completed %llu\n", static_cast<unsigned long long>(a.stats().exchanges));
  std::printf("bench_max_rss_kib %ld\n", ru.ru_maxrss);
  std::printf("target_ratio 0.85 %s\n", ratio >= 0.85 ? "met" : "NOT_MET");
  return 0;
}
