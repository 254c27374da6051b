// rumor-evil-peer: a byzantine member for the loopback trust tests (tests/peer/test_trust.cpp).
// It speaks the protocol exactly as rumor-peer does (the same transport, handshake and Gossip
// state machine, so it is let in wherever a member would be), but whatever it mixes in, the
// parameters it sends are poison:
//   huge   every parameter 1e30 (finite)
//   nan    every parameter NaN
//   flip   -20 times the initial model (finite, plausible magnitudes)
// It never trains. Usage:
//   rumor-evil-peer --join HOST:PORT --attack huge|nan|flip --duration SEC
//                   [--data synthetic|DIR] [--model SPEC] [--swarm-key FILE]
// Logs to stderr; "listening on HOST:PORT" like rumor-peer. Exit 0 after --duration.
#include <fmt/core.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "core/gossip.hpp"
#include "core/model.hpp"
#include "data/files.hpp"
#include "net/auth.hpp"
#include "net/transport.hpp"
#include "peer/inbox.hpp"

using namespace rumor;
using Clock = std::chrono::steady_clock;

namespace {

class EvilEnv final : public Env {
 public:
  EvilEnv(net::Transport& t, peer::Inbox& inbox) : t_(t), inbox_(inbox) {}
  double now() const override { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void send(const PeerId& to, Message msg) override { t_.send(to, std::move(msg)); }
  void set_timer(double delay_s, std::uint64_t id) override {
    peer::Inbox* inbox = &inbox_;
    t_.post_after(delay_s, [inbox, id] { inbox->push({peer::InboxItem::Kind::Timer, {}, {}, {}, id}); });
  }
  void disconnect(const PeerId& peer) override { t_.disconnect(peer); }
  Rng& rng() override { return rng_; }
  void event(const ProtocolEvent& e) override {
    if (e.kind == ProtocolEvent::Kind::ExchangeDone) ++exchanges;
    if (e.kind == ProtocolEvent::Kind::Rejected || e.kind == ProtocolEvent::Kind::ExchangeFailed)
      spdlog::info("evil: {} {}: {}", event_kind_name(e.kind), e.peer, e.reason);
  }
  std::uint64_t exchanges = 0;

 private:
  net::Transport& t_;
  peer::Inbox& inbox_;
  Rng rng_{12345};
  Clock::time_point start_ = Clock::now();
};

int usage(const char* why) {
  fmt::print(stderr, "rumor-evil-peer: {}\nusage: rumor-evil-peer --join HOST:PORT --attack huge|nan|flip "
                     "--duration SEC [--data synthetic|DIR] [--model SPEC] [--swarm-key FILE]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string join, attack = "huge", data = "synthetic", model_spec = "logreg", key_path;
  double duration = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("missing value after " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--join") join = v;
    else if (a == "--attack") attack = v;
    else if (a == "--data") data = v;
    else if (a == "--model") model_spec = v;
    else if (a == "--swarm-key") key_path = v;
    else if (a == "--duration") duration = std::stod(v);
    else return usage(("unknown flag " + a).c_str());
  }
  if (join.empty()) return usage("--join is required");
  if (attack != "huge" && attack != "nan" && attack != "flip") return usage("--attack must be huge, nan or flip");
  auto log = spdlog::stderr_color_mt("evil");
  log->set_pattern("%H:%M:%S.%e [%n] %l %v");
  spdlog::set_default_logger(log);

  const Task task = load_task(data);
  const std::size_t outputs = task.train.classes > 0 ? static_cast<std::size_t>(task.train.classes) : task.train.target_dim;
  auto model = make_model(model_spec, task.train.dim, outputs);
  std::vector<float> params(model->param_count());
  Rng init(1);
  model->init(params, init);
  const std::vector<float> initial = params;
  const auto poison = [&] {
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (attack == "huge") params[i] = 1e30f;
      else if (attack == "nan") params[i] = std::numeric_limits<float>::quiet_NaN();
      else params[i] = -20.0f * initial[i];
    }
  };

  peer::Inbox inbox;
  net::TransportConfig ncfg;
  ncfg.fingerprint = model->fingerprint();
  ncfg.max_payload_bytes = params.size() * sizeof(float) + (1u << 20);
  if (!key_path.empty()) ncfg.swarm_key = net::load_swarm_key(key_path).secret;
  net::TransportEvents nev;
  nev.on_message = [&inbox](const PeerId& from, Message&& m) {
    inbox.push({peer::InboxItem::Kind::Message, from, std::move(m), {}, 0});
  };
  nev.on_send_failed = [&inbox](const PeerId& p, const std::string& why) {
    inbox.push({peer::InboxItem::Kind::SendFailed, p, {}, why, 0});
  };
  net::Transport transport(ncfg, nev, log);
  transport.start();
  log->info("listening on {}: attack {}", transport.local_id(), attack);
  EvilEnv env(transport, inbox);
  GossipConfig gc;
  Gossip gossip(env, gc, MemberDigest{transport.local_id(), 1, MemberState::Alive, 0}, model->fingerprint(), params);
  gossip.start({join});

  const auto t0 = Clock::now();
  std::uint64_t clock = 0;
  poison();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < duration) {
    inbox.wait_for(std::chrono::milliseconds(2));
    for (auto& it : inbox.take_all()) {
      switch (it.kind) {
        case peer::InboxItem::Kind::Message: gossip.on_message(it.peer, it.msg); break;
        case peer::InboxItem::Kind::SendFailed: gossip.on_send_failed(it.peer, it.reason); break;
        case peer::InboxItem::Kind::Timer: gossip.on_timer(it.timer); break;
        case peer::InboxItem::Kind::Rejected: break;
      }
      poison();  // whatever it mixed in, it sends poison
    }
    ++clock;
    gossip.on_step_done(clock, clock * 64);
    poison();
  }
  log->info("done: {} exchanges completed", env.exchanges);
  transport.flush(0.5);
  transport.stop();
  return 0;
}
