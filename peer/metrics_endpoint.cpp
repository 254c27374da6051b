// MetricsEndpoint (metrics_endpoint.hpp): prometheus-cpp's registry and pull Exposer for
// /metrics, and, on the same civetweb server, /status.json and / (the swarm page).
//
// The Exposer serves only what its public API registers (collectables at a URI), but it hands
// its CivetCallbacks to civetweb, whose begin_request callback sees every request first: that
// is where / and /status.json are answered (civetweb parses HTTP and writes the response
// header; nothing here parses a request). The callback is a plain function, so it finds the
// endpoint a request belongs to through a small table from civetweb's context to endpoint,
// filled by the init_context callback, which civetweb calls on the constructing thread before
// it serves anything. The table is the one process-wide thing here; it lets several peers
// (a Python process may hold several) each serve their own page.
#include "peer/metrics_endpoint.hpp"

#include <CivetServer.h>
#include <civetweb.h>
#include <netdb.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

#include "net/address.hpp"

namespace rumor::peer {

extern const char* const kSwarmPage;  // swarm_page.cpp, generated from peer/swarm_page.html

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The loop's phases as rumor_phase{phase=...} (core/peer_loop.hpp loop_phase_name).
constexpr std::array<const char*, 9> kPhases = {"idle",     "joining", "min_peers", "state", "training",
                                                "settling", "leaving", "final",     "exited"};

// HOST:PORT -> civetweb's listening_ports form ("1.2.3.4:P" or "[v6]:P"): civetweb takes
// numeric addresses only (and reads a malformed one as "all interfaces"), so the host is
// resolved here, once.
std::string civetweb_listen(const std::string& listen, const char* flag) {
  const net::HostPort hp = net::parse_host_port(listen, flag, true);  // std::invalid_argument
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(hp.host.c_str(), nullptr, &hints, &res); rc != 0 || !res)
    throw std::invalid_argument(std::string(flag) + " " + listen + ": cannot resolve '" + hp.host + "': " + gai_strerror(rc));
  char host[NI_MAXHOST];
  const int rc = ::getnameinfo(res->ai_addr, res->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  const bool v6 = res->ai_family == AF_INET6;
  ::freeaddrinfo(res);
  if (rc != 0) throw std::invalid_argument(std::string(flag) + " " + listen + ": cannot resolve '" + hp.host + "'");
  return v6 ? "[" + std::string(host) + "]:" + std::to_string(hp.port) : std::string(host) + ":" + std::to_string(hp.port);
}

// One history of the page: at most kMaxHistory points; when full, every other point goes and
// new points come half as often, so a long run keeps its whole span at a coarser grain.
template <class T>
struct History {
  std::vector<T> points;
  double every = MetricsEndpoint::kHistoryInterval;
  double next = 0;
  bool due(double t) const { return t >= next; }
  void add(double t, T p) {
    points.push_back(std::move(p));
    next = t + every;
    if (points.size() >= MetricsEndpoint::kMaxHistory) {
      std::vector<T> kept;
      kept.reserve(points.size() / 2 + 1);
      for (std::size_t i = 0; i < points.size(); i += 2) kept.push_back(points[i]);
      if (kept.back().t != points.back().t) kept.back() = points.back();
      points.swap(kept);
      every *= 2;
    }
  }
};

struct EvalPoint {
  double t;
  std::uint64_t step;
  double acc, loss;
};
struct RatePoint {  // totals at t: the page differentiates
  double t;
  std::uint64_t bytes_sent, bytes_recv, exchanges, samples, clock, slowest, fastest;
};
struct ClockPoint {
  double t;
  std::uint64_t clock;
};

// What /status.json serves: a snapshot the compute thread hands over whole (never edited).
struct Status {
  double unix0 = 0, t = 0;
  std::string phase;
  PeerSample s;  // members included
  std::size_t members_total = 0;
  double acc = NAN, loss = NAN, samples_per_s = 0;
  std::uint64_t exchanges = 0, failed = 0, declined = 0, rejected = 0;
  std::vector<EvalPoint> evals;
  std::vector<RatePoint> rates;
  std::vector<std::pair<std::string, std::vector<ClockPoint>>> member_clocks;
};

}  // namespace

class MetricsEndpoint::Impl {
 public:
  Impl(const std::string& listen, const char* flag, const std::string& peer, const std::string& name,
       std::shared_ptr<spdlog::logger> log);
  ~Impl();

  // Answers / and /status.json; 0 leaves the request to civetweb (the Exposer's /metrics, 404s).
  int serve(mg_connection* conn);
  std::string status_json() const;
  bool interested() const {  // /status.json was read lately
    return steady_seconds() - status_read_at_.load(std::memory_order_relaxed) < MetricsEndpoint::kStatusInterest;
  }

  std::shared_ptr<spdlog::logger> log_;
  std::string peer_, name_, address_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Counter *steps_, *samples_, *sent_, *recv_, *waits_, *wait_s_, *stale_;
  prometheus::Counter *done_, *declined_, *failed_, *rejected_;
  prometheus::Counter *state_received_, *state_failed_, *handovers_, *robust_refused_, *robust_clipped_;
  prometheus::Gauge *alive_, *suspect_, *clock_, *slowest_, *accuracy_, *test_loss_, *sps_, *distance_;
  std::array<prometheus::Gauge*, kPhases.size()> phase_{};
  prometheus::Histogram *duration_, *payload_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  // Compute thread only.
  PeerSample last_;  // the totals published so far (counter increments are differences)
  double window_t_ = -1, window_train_s_ = 0;
  std::uint64_t window_samples_ = 0;
  double samples_per_s_ = 0;
  std::uint64_t exchanges_ = 0, failed_n_ = 0, declined_n_ = 0, rejected_n_ = 0;
  double acc_ = NAN, loss_ = NAN;
  double unix0_ = 0;
  History<EvalPoint> evals_;
  History<RatePoint> rates_;
  std::map<std::string, History<ClockPoint>> member_clocks_;
  double next_status_ = 0;

  // Shared with the HTTP threads.
  mutable std::mutex status_mu_;
  std::shared_ptr<const Status> status_;
  std::atomic<double> status_read_at_{-1e300};  // steady_seconds() of the last /status.json
};

namespace {
std::mutex g_endpoints_mu;
std::map<const mg_context*, MetricsEndpoint::Impl*> g_endpoints;  // see the top of the file
thread_local MetricsEndpoint::Impl* t_starting = nullptr;          // the endpoint whose server is starting here
thread_local std::string t_start_error;                            // civetweb's last complaint while starting

void on_init_context(const mg_context* ctx) {
  if (!t_starting) return;
  std::lock_guard<std::mutex> lk(g_endpoints_mu);
  g_endpoints[ctx] = t_starting;
}
void on_exit_context(const mg_context* ctx) {
  std::lock_guard<std::mutex> lk(g_endpoints_mu);
  g_endpoints.erase(ctx);
}
int on_begin_request(mg_connection* conn) {
  MetricsEndpoint::Impl* impl = nullptr;
  {
    std::lock_guard<std::mutex> lk(g_endpoints_mu);
    const auto it = g_endpoints.find(mg_get_context(conn));
    if (it != g_endpoints.end()) impl = it->second;
  }
  return impl ? impl->serve(conn) : 0;
}
int on_log_message(const mg_connection*, const char* message) {
  // The first complaint is the cause ("cannot bind to 127.0.0.1:9100: 98 (Address already in use)").
  if (t_starting && t_start_error.empty()) t_start_error = message;
  return 1;  // not on stderr: the caller reports it (or it is a client's broken connection)
}
}  // namespace

MetricsEndpoint::Impl::Impl(const std::string& listen, const char* flag, const std::string& peer,
                            const std::string& name, std::shared_ptr<spdlog::logger> log)
    : log_(std::move(log)), peer_(peer), name_(name) {
  const std::string bind = civetweb_listen(listen, flag);
  prometheus::Labels labels{{"peer", peer_}};
  if (!name_.empty()) labels["name"] = name_;
  prometheus::Registry& r = *registry_;
  auto counter = [&](const char* n, const char* help) -> prometheus::Family<prometheus::Counter>& {
    return prometheus::BuildCounter().Name(n).Help(help).Labels(labels).Register(r);
  };
  auto gauge = [&](const char* n, const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return prometheus::BuildGauge().Name(n).Help(help).Labels(labels).Register(r);
  };
  steps_ = &counter("rumor_steps_total", "Local optimizer steps done (the peer's clock)").Add({});
  samples_ = &counter("rumor_samples_total", "Training samples processed").Add({});
  auto& ex = counter("rumor_exchanges_total",
                     "Exchanges by result: done (mixed, either role), declined (by a healthy peer, as the protocol "
                     "says), failed (started and given up), rejected (bad input refused)");
  done_ = &ex.Add({{"result", "done"}});
  declined_ = &ex.Add({{"result", "declined"}});
  failed_ = &ex.Add({{"result", "failed"}});
  rejected_ = &ex.Add({{"result", "rejected"}});
  sent_ = &counter("rumor_sent_bytes_total", "Bytes sent on all connections, frames and handshakes included").Add({});
  recv_ = &counter("rumor_received_bytes_total", "Bytes received on all connections").Add({});
  waits_ = &counter("rumor_staleness_waits_total", "Times the staleness bound held this peer back").Add({});
  wait_s_ = &counter("rumor_staleness_wait_seconds_total", "Seconds the staleness bound held this peer back").Add({});
  stale_ = &counter("rumor_stale_exchanges_total", "Exchanges refused because the clocks were more than TAU apart").Add({});
  auto& st = counter("rumor_state_transfers_total", "State transfers of a joiner: received (the swarm's model) or failed");
  state_received_ = &st.Add({{"result", "received"}});
  state_failed_ = &st.Add({{"result", "failed"}});
  handovers_ = &counter("rumor_handovers_total", "Models of leaving peers taken over").Add({});
  auto& rb = counter("rumor_robust_total", "Received models clipped or refused by robust mixing (--robust)");
  robust_clipped_ = &rb.Add({{"action", "clipped"}});
  robust_refused_ = &rb.Add({{"action", "refused"}});
  auto& piv = gauge("rumor_peers_in_view", "Live members in this peer's view, itself included (alive), or suspected");
  alive_ = &piv.Add({{"state", "alive"}});
  suspect_ = &piv.Add({{"state", "suspect"}});
  clock_ = &gauge("rumor_clock", "Local steps done").Add({});
  slowest_ = &gauge("rumor_slowest_clock", "Smallest clock of the other alive members this peer knows of").Add({});
  accuracy_ = &gauge("rumor_test_accuracy", "Test accuracy at the last evaluation").Add({});
  test_loss_ = &gauge("rumor_test_loss", "Test loss at the last evaluation").Add({});
  sps_ = &gauge("rumor_samples_per_second", "Training samples per second of step time, over the last seconds").Add({});
  distance_ = &gauge("rumor_consensus_distance",
                     "Relative distance between the two models at the last exchange, the consensus estimate").Add({});
  auto& ph = gauge("rumor_phase", "1 for the phase the peer's loop is in, 0 for the others");
  for (std::size_t i = 0; i < kPhases.size(); ++i) phase_[i] = &ph.Add({{"phase", kPhases[i]}});
  accuracy_->Set(NAN);
  test_loss_->Set(NAN);
  duration_ = &prometheus::BuildHistogram()
                   .Name("rumor_exchange_duration_seconds")
                   .Help("Exchanges this peer started: seconds from the request to mixing the reply")
                   .Labels(labels)
                   .Register(r)
                   .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                    0.5, 1, 2.5, 5, 10, 30});
  prometheus::Histogram::BucketBoundaries bytes;
  for (double b = 1024; b <= 4.0 * 1024 * 1024 * 1024; b *= 4) bytes.push_back(b);  // 1 KiB .. 4 GiB
  payload_ = &prometheus::BuildHistogram()
                  .Name("rumor_exchange_payload_bytes")
                  .Help("Completed exchanges: bytes of the encoded parameter snapshot this peer sent")
                  .Labels(labels)
                  .Register(r)
                  .Add({}, bytes);

  CivetCallbacks callbacks;
  callbacks.begin_request = on_begin_request;
  callbacks.init_context = on_init_context;
  callbacks.exit_context = on_exit_context;
  callbacks.log_message = on_log_message;
  t_starting = this;
  t_start_error.clear();
  try {
    // Two threads: a scrape and a page refresh at once; more would only sit idle.
    exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", bind, "num_threads", "2", "request_timeout_ms", "5000"}, &callbacks);
  } catch (const std::exception& e) {
    t_starting = nullptr;
    throw std::invalid_argument(std::string(flag) + " " + listen + ": cannot listen: " +
                                (t_start_error.empty() ? e.what() : t_start_error));
  }
  t_starting = nullptr;
  exposer_->RegisterCollectable(registry_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  const net::HostPort hp = net::parse_host_port(listen, flag, true);
  address_ = (hp.host.find(':') != std::string::npos ? "[" + hp.host + "]" : hp.host) + ":" +
             std::to_string(ports.empty() ? hp.port : ports.front());
}

MetricsEndpoint::Impl::~Impl() {
  exposer_.reset();  // joins civetweb's threads (exit_context drops our table entry)
}

int MetricsEndpoint::Impl::serve(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const std::string uri = ri->local_uri ? ri->local_uri : "";
  const std::string method = ri->request_method ? ri->request_method : "";
  if (uri != "/" && uri != "/status.json") return 0;
  if (method != "GET" && method != "HEAD") {
    mg_send_http_error(conn, 405, "only GET");
    return 405;
  }
  std::string body, type;
  if (uri == "/") {
    body = kSwarmPage;
    type = "text/html; charset=utf-8";
  } else {
    status_read_at_.store(steady_seconds(), std::memory_order_relaxed);
    body = status_json();
    type = "application/json";
  }
  // The page may gather several peers' /status.json (docs/metrics.md): they are read-only and
  // public like /metrics, so any origin may read them.
  mg_response_header_start(conn, 200);
  mg_response_header_add(conn, "Content-Type", type.c_str(), -1);
  mg_response_header_add(conn, "Content-Length", std::to_string(body.size()).c_str(), -1);
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  if (uri == "/status.json") mg_response_header_add(conn, "Access-Control-Allow-Origin", "*", -1);
  mg_response_header_send(conn);
  if (method == "GET") mg_write(conn, body.data(), body.size());
  return 200;
}

std::string MetricsEndpoint::Impl::status_json() const {
  std::shared_ptr<const Status> st;
  {
    std::lock_guard<std::mutex> lk(status_mu_);
    st = status_;
  }
  using nlohmann::ordered_json;
  ordered_json j;
  j["peer"] = peer_;
  j["name"] = name_;
  j["metrics"] = address_;
  j["unix_time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (!st) {
    j["ready"] = false;  // nothing published yet (the first snapshot comes within a second)
    return j.dump();
  }
  const PeerSample& s = st->s;
  const double u0 = st->unix0;
  j["ready"] = true;
  j["t_unix"] = u0 + st->t;
  j["phase"] = st->phase;
  j["training_started_unix"] = s.training_started >= 0 ? ordered_json(u0 + s.training_started) : ordered_json(nullptr);
  j["clock"] = s.clock;
  j["slowest"] = s.slowest;
  j["fastest"] = s.fastest;
  j["peers"] = {{"alive", s.alive}, {"suspect", s.suspect}};
  j["test_acc"] = st->acc;
  j["loss"] = st->loss;
  j["samples_per_s"] = st->samples_per_s;
  j["consensus_distance"] = s.distance;
  j["totals"] = {{"steps", s.clock},         {"samples", s.samples},       {"exchanges", st->exchanges},
                 {"exchanges_failed", st->failed}, {"exchanges_declined", st->declined}, {"rejected", st->rejected},
                 {"bytes_sent", s.bytes_sent}, {"bytes_recv", s.bytes_recv},   {"waits", s.waits},
                 {"wait_s", s.wait_seconds}};
  ordered_json members = ordered_json::array();
  for (const MemberRow& m : s.members) members.push_back({{"id", m.id}, {"state", m.state}, {"clock", m.clock}, {"self", m.id == peer_}});
  j["members"] = std::move(members);
  j["members_total"] = st->members_total;
  // What this peer does not know, said rather than guessed: the protocol carries each
  // member's clock (in every view digest), not its accuracy.
  j["members_accuracy"] = "unknown: the gossip protocol carries members' clocks, not their accuracy; the page reads "
                          "other peers' /status.json when given their metrics addresses (?peers=HOST:PORT,...)";
  ordered_json evals = ordered_json::array();
  for (const EvalPoint& e : st->evals) evals.push_back({u0 + e.t, e.step, e.acc, e.loss});
  j["evals"] = {{"columns", {"t_unix", "step", "test_acc", "loss"}}, {"rows", std::move(evals)}};
  ordered_json rates = ordered_json::array();
  for (const RatePoint& p : st->rates)
    rates.push_back({u0 + p.t, p.bytes_sent, p.bytes_recv, p.exchanges, p.samples, p.clock, p.slowest, p.fastest});
  j["history"] = {{"columns", {"t_unix", "bytes_sent", "bytes_recv", "exchanges", "samples", "clock", "slowest", "fastest"}},
                  {"rows", std::move(rates)}};
  ordered_json clocks = ordered_json::object();
  for (const auto& [id, pts] : st->member_clocks) {
    ordered_json rows = ordered_json::array();
    for (const ClockPoint& p : pts) rows.push_back({u0 + p.t, p.clock});
    clocks[id] = std::move(rows);
  }
  j["member_clocks"] = std::move(clocks);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

MetricsEndpoint::MetricsEndpoint(const std::string& listen, const char* flag, const std::string& peer,
                                 const std::string& name, std::shared_ptr<spdlog::logger> log)
    : impl_(std::make_unique<Impl>(listen, flag, peer, name, std::move(log))) {}

MetricsEndpoint::~MetricsEndpoint() = default;

const std::string& MetricsEndpoint::address() const { return impl_->address_; }

void MetricsEndpoint::exchange_done(bool initiator, double rtt_s, double payload_bytes) {
  impl_->done_->Increment();
  ++impl_->exchanges_;
  if (initiator) impl_->duration_->Observe(rtt_s);
  if (payload_bytes > 0) impl_->payload_->Observe(payload_bytes);
}
void MetricsEndpoint::exchange_failed() {
  impl_->failed_->Increment();
  ++impl_->failed_n_;
}
void MetricsEndpoint::exchange_declined() {
  impl_->declined_->Increment();
  ++impl_->declined_n_;
}
void MetricsEndpoint::rejected() {
  impl_->rejected_->Increment();
  ++impl_->rejected_n_;
}
void MetricsEndpoint::state_transfer(bool received) { (received ? impl_->state_received_ : impl_->state_failed_)->Increment(); }
void MetricsEndpoint::handover() { impl_->handovers_->Increment(); }

void MetricsEndpoint::eval(double t, std::uint64_t step, double test_acc, double loss) {
  Impl& m = *impl_;
  m.acc_ = test_acc;
  m.loss_ = loss;
  m.accuracy_->Set(test_acc);
  m.test_loss_->Set(loss);
  // Every evaluation is kept (they are rare); only a very long run thins them.
  m.evals_.next = 0;
  m.evals_.add(t, EvalPoint{t, step, test_acc, loss});
  m.next_status_ = 0;  // show it at the next publish
}

bool MetricsEndpoint::members_due(double t) const {
  const Impl& m = *impl_;
  return m.rates_.due(t) || (t >= m.next_status_ && m.interested());
}

void MetricsEndpoint::set_unix_origin(double unix0) { impl_->unix0_ = unix0; }

void MetricsEndpoint::publish(const PeerSample& s) {
  Impl& m = *impl_;
  next_publish_ = s.t + kPublishInterval;
  auto add = [](prometheus::Counter* c, auto now, auto before) {
    if (now > before) c->Increment(static_cast<double>(now - before));
  };
  add(m.steps_, s.clock, m.last_.clock);
  add(m.samples_, s.samples, m.last_.samples);
  add(m.sent_, s.bytes_sent, m.last_.bytes_sent);
  add(m.recv_, s.bytes_recv, m.last_.bytes_recv);
  add(m.waits_, s.waits, m.last_.waits);
  add(m.wait_s_, s.wait_seconds, m.last_.wait_seconds);
  add(m.stale_, s.stale, m.last_.stale);
  add(m.robust_clipped_, s.robust_clipped, m.last_.robust_clipped);
  add(m.robust_refused_, s.robust_refused, m.last_.robust_refused);
  m.alive_->Set(static_cast<double>(s.alive));
  m.suspect_->Set(static_cast<double>(s.suspect));
  m.clock_->Set(static_cast<double>(s.clock));
  m.slowest_->Set(static_cast<double>(s.slowest));
  m.distance_->Set(s.distance);
  for (std::size_t i = 0; i < kPhases.size(); ++i) m.phase_[i]->Set(std::string_view(kPhases[i]) == s.phase ? 1 : 0);
  // samples/s of step time over a window of at least 2 s (a step may be long).
  if (m.window_t_ < 0) {
    m.window_t_ = s.t;
    m.window_train_s_ = s.train_seconds;
    m.window_samples_ = s.samples;
  } else if (s.t - m.window_t_ >= 2.0) {
    const double dt = s.train_seconds - m.window_train_s_;
    m.samples_per_s_ = dt > 0 ? static_cast<double>(s.samples - m.window_samples_) / dt : 0.0;
    m.sps_->Set(m.samples_per_s_);
    m.window_t_ = s.t;
    m.window_train_s_ = s.train_seconds;
    m.window_samples_ = s.samples;
  }
  // The page's histories, about once a second.
  const bool status_due = s.t >= m.next_status_ && m.interested() && !s.members.empty();
  if (m.rates_.due(s.t) && !s.members.empty()) {
    m.rates_.add(s.t, RatePoint{s.t, s.bytes_sent, s.bytes_recv, m.exchanges_, s.samples, s.clock, s.slowest, s.fastest});
    for (const MemberRow& r : s.members) {
      auto it = m.member_clocks_.find(r.id);
      if (it == m.member_clocks_.end()) {
        if (m.member_clocks_.size() >= kMaxMemberCurves) continue;
        it = m.member_clocks_.emplace(r.id, History<ClockPoint>{}).first;
      }
      it->second.next = 0;
      it->second.add(s.t, ClockPoint{s.t, r.clock});
    }
  }
  m.last_ = s;
  m.last_.members.clear();
  // A new /status.json snapshot, about once a second, only while somebody reads it.
  if (status_due) {
    m.next_status_ = s.t + kHistoryInterval;
    auto st = std::make_shared<Status>();
    st->unix0 = m.unix0_;
    st->t = s.t;
    st->phase = s.phase;
    st->s = s;
    st->members_total = s.members_total;
    st->acc = m.acc_;
    st->loss = m.loss_;
    st->samples_per_s = m.samples_per_s_;
    st->exchanges = m.exchanges_;
    st->failed = m.failed_n_;
    st->declined = m.declined_n_;
    st->rejected = m.rejected_n_;
    st->evals = m.evals_.points;
    st->rates = m.rates_.points;
    for (const auto& [id, h] : m.member_clocks_) st->member_clocks.emplace_back(id, h.points);
    std::shared_ptr<const Status> done = std::move(st);
    std::lock_guard<std::mutex> lk(m.status_mu_);
    m.status_.swap(done);  // the old snapshot is freed here or by the last reader holding it
  }
}

}  // namespace rumor::peer
