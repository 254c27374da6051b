// Env: the whole world of one protocol instance, and the one seam that lets the daemon and the
// simulator run the same gossip code (docs/ARCHITECTURE.md). The daemon implements it with Asio
// and the monotonic system clock (peer/), the simulator with an event queue and a virtual clock (sim/).
//
// Contract: the protocol calls Env only from within its own handlers, and its handlers are
// called one at a time, always between two training steps (so the live parameters are stable).
#pragma once
#include <cstdint>
#include <string>

#include "core/codec.hpp"
#include "core/message.hpp"
#include "core/rng.hpp"

namespace rumor {

// Something that happened that a user or a study wants to see: metrics lines in the daemon,
// events.csv in the simulator. Fields that do not apply stay at their defaults.
struct ProtocolEvent {
  enum class Kind {
    ExchangeDone,    // an exchange completed and was mixed in (peer, bytes, distance)
    ExchangeFailed,  // deadline missed, peer unreachable, our input refused (peer, reason)
    ExchangeDeclined,  // the peer declined, as the protocol says it should: crossing requests, joining, leaving, stale (peer, reason)
    Rejected,        // bad input from a peer: refused, nothing mixed (peer, reason)
    Join,            // a member entered our view (peer)
    Leave,           // a member left gracefully (peer)
    Dead,            // a member was declared dead (peer)
    Suspect,         // a member is suspected (peer)
    Joined,          // we got the view from a seed (peer = the seed)
    Wait,            // the staleness bound holds us back (clock, slowest, seconds)
    StateReceived,   // a joiner got the model from `peer` (other = its step)
    StateFailed,     // no member delivered the model: training from our own initialisation
    Handover,        // a leaving peer handed us its model and we merged it (peer, distance)
    // The loop around the protocol (core/peer_loop.hpp):
    JoinFailed,      // no member of the join list answered within --join-timeout (reason: Gossip::join_failure())
    Founded,         // none answered, but we are in our own join list: we start the swarm (seconds: the join timeout)
    PeersInView,     // the --min-peers wait ended (other = peers in view, ourselves included; seconds; reason "timed out" or empty)
    Training,        // training begins after a state wait (other = the swarm's step adopted, or 0; seconds waited; reason why none was adopted)
    Diverged,        // the loss of a step was not finite (clock; reason = the loss)
    Settled,         // settling ended (other = exchanges while settling; seconds; distance = the last one)
    Departed,        // the graceful leave ended (seconds; reason "no neighbour confirmed the hand-over" or empty)
  } kind;
  PeerId peer;
  std::string reason;
  double distance = 0;       // ExchangeDone: ||x_s - m|| / max(||x_s||, ||m||)
  double seconds = 0;        // Wait: time waited; ExchangeDone: round-trip time
  std::uint64_t clock = 0;   // our clock (local steps)
  std::uint64_t other = 0;   // ExchangeDone: peer's clock; Wait: the slowest clock
  PayloadCodec codec = PayloadCodec::None;  // ExchangeDone: the codec its payloads went in
};

const char* event_kind_name(ProtocolEvent::Kind k);

// A peer's CPU clocks, where its front end has them (Env::cpu(); total < 0: none). `total`:
// the CPU the peer has used, in any unit (the daemon: its process's CPU seconds, every thread;
// the simulator: its charged compute); `protocol`: the part of it spent in the protocol's
// handlers (messages, timers, starting an exchange: snapshot, codec, hash, mix), in the same
// unit. --local-steps auto counts an exchange's own CPU in its cost (Gossip::exchange_cpu_seconds).
struct CpuClocks {
  double total = -1, protocol = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  virtual double now() const = 0;  // seconds, monotonic
  // Delivery is best-effort: failures come back as Gossip::on_send_failed or as a timeout.
  virtual void send(const PeerId& to, Message msg) = 0;
  // Gossip::on_timer(id) after delay_s seconds. Timers cannot be cancelled: handlers check
  // whether a timer is still relevant. A negative delay is a timer already due, by that much
  // (fire it at once; the simulator puts it among the inputs a busy peer held, in time order).
  virtual void set_timer(double delay_s, std::uint64_t id) = 0;
  // Close any connection to `peer` (after bad input); a no-op in the simulator.
  virtual void disconnect(const PeerId& peer) = 0;
  virtual Rng& rng() = 0;
  virtual void event(const ProtocolEvent& e) = 0;
  virtual CpuClocks cpu() const { return {}; }
};

}  // namespace rumor
