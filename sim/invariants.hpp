// The invariant checker: the protocol's safety and liveness properties, checked after every
// event of a Simulation (docs/testing.md lists them with their bounds). It reads TAU and the
// timing settings from the scenario, so it holds any scenario to its own rules: turn it on with
// `[invariants] check = on`, or Simulation::check_invariants(); every campaign run has it.
//
//  conservation  training off, uniform weights, codec none, no churn and no fault that loses
//                an exchange's half (FaultSettings::changes_sum): the sum of the parameters,
//                counting what initiators still owe for exchanges whose responder mixed;
//  tau_mix       the snapshots of an exchange (request and reply clocks) are at most TAU apart;
//  tau_step      a peer never starts a step more than TAU past the slowest clock it knows (the
//                loop's own record of its step starts, LoopStats::max_gap);
//  clock         a peer's clock never decreases, nor does the clock it tells others (its
//                digest) once it trains, across a restart from its own model too;
//  one_exchange  no peer has two open exchanges with the same partner;
//  finite        no non-finite value is in a live model (nothing non-finite is ever mixed);
//  detection     a crashed peer leaves every live view within detection_bound() seconds;
//  heal          after a partition heals, every live peer's view holds every other live peer
//                within heal_bound() seconds (no split brain);
//  liveness      every running peer makes progress (a step, a phase change, an exit) within
//                liveness_bound() seconds, and the run ends by run_bound(): nothing waits forever.
// The first broken invariant is kept (name, time, peer, detail); checking goes on, counting.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/message.hpp"
#include "sim/scenario.hpp"

namespace rumor::sim {

class Simulation;

struct Violation {
  std::string name;    // the invariant (names above)
  double time = 0;     // virtual time
  std::string peer;    // the peer it concerns ("" for the swarm)
  std::string detail;  // one line
  std::string line() const;  // "NAME at T s, PEER: DETAIL"
};

class InvariantChecker {
 public:
  explicit InvariantChecker(const Scenario& s);

  // Every message as its sender hands it over (before the network or a fault touches it).
  void on_send(const Simulation& sim, std::uint32_t from, std::uint32_t to, const Message& m);
  // After every event; `peer` is the peer the event was for (-1: none in particular).
  void after_event(const Simulation& sim, std::int64_t peer);
  // Once the run is over (or stopped at `run_bound()`): what must hold at the end.
  void at_end(const Simulation& sim);

  bool ok() const { return !first_.has_value(); }
  const std::optional<Violation>& first() const { return first_; }
  std::uint64_t violations() const { return violations_; }

  // The bounds, from the scenario (seconds of virtual time).
  double detection_bound() const { return detection_bound_; }
  double heal_bound() const { return heal_bound_; }
  double liveness_bound() const { return liveness_bound_; }
  double run_bound() const { return run_bound_; }
  bool conservation_on() const { return conservation_; }
  // Tests: check conservation although the scenario's faults could legitimately move the sum
  // (before the first event).
  void force_conservation() { conservation_ = true; }

  // How much was checked (tests assert the checks were not vacuous).
  struct Counts {
    std::uint64_t events = 0, conservation = 0, half_applied = 0, tau_mix = 0, tau_step = 0, detection = 0,
                  heal = 0, finite = 0;
  };
  const Counts& counts() const { return counts_; }

 private:
  void fail(const std::string& name, double t, const std::string& peer, const std::string& detail);
  std::vector<double> conserved_sums(const Simulation& sim, bool count_owed);
  void check_peer(const Simulation& sim, std::uint32_t i);

  const Scenario& s_;
  double tau_;
  bool conservation_ = false;
  double detection_bound_ = 0, heal_bound_ = 0, liveness_bound_ = 0, run_bound_ = 0;
  std::optional<Violation> first_;
  std::uint64_t violations_ = 0;
  Counts counts_;
  bool started_ = false;
  std::vector<std::size_t> dims_;
  std::vector<double> sum0_;
  // Per peer id.
  struct Seen {
    std::uint32_t life = 0;
    int state = -1;
    std::uint64_t clock = 0, slowest = 0, told = 0;
    double progress_at = 0;  // last step, phase or state change
    int phase = -1;
    bool reported_stuck = false, reported_gap = false;
  };
  std::vector<Seen> seen_;
  // Exchanges: the request's clock, by (initiator, responder, id).
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>, std::uint64_t> request_clock_;
  // Crashes whose detection bound has not come yet: (peer, its life then, crash time).
  struct Crash {
    std::uint32_t peer, life;
    double at;
  };
  std::vector<Crash> crashes_;
  double heal_seen_ = -1;     // the heal being checked (its time), -1: none
  std::vector<double> heals_;  // heals whose check is still to come
};

}  // namespace rumor::sim
