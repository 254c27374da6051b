// The discrete-event simulator: many peers running core's real Gossip protocol and Trainer
// behind a simulated Env (virtual time), in one thread.
//
// What a peer does is rumor-peer's loop itself: core's PeerLoop (core/peer_loop.hpp), driven
// here with virtual time, so a study predicts a real run:
//   load (class `start` s) -> PeerLoop::start(seeds) -> then whatever it says: Step (its math
//   at the mid-step boundary, inputs held to its end), Wait (inputs handled as they come; one
//   event at `until`), Evaluate (holds the peer eval_time), Exit.
// "drain" hands the inputs queued during the step (messages, timers, send failures) to Gossip
// in arrival order. A peer that is not in a step (settling; training off) handles inputs as
// they arrive. Gossip is therefore only ever called between steps, as its contract requires.
// A step's virtual duration comes from the compute model; its math is done at the mid-step
// boundary (the parameters cannot change during a step: inputs wait for its boundaries).
//
// Engine: events in a binary heap ordered by (virtual time, sequence); equal times run in the
// order scheduled. The clock jumps from event to event. A timeseries sample at time T sees
// every event with time <= T and none later. No wall clock reaches any output.
//
// Churn: crash = the process vanishes now (mid-step too); connections to it are refused after
// `refused_after`. Graceful leave = what SIGTERM does to rumor-peer: at its next step boundary
// it drains, skips settling, Gossip::leave() (announce, hand the model over), waits for the
// LeaveAck (bounded) and exits. Join = a new process with a new id, or a restart of a dead one
// (a higher incarnation), joining through seeds chosen by `bootstrap`.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/gossip.hpp"
#include "core/peer_loop.hpp"
#include "core/model.hpp"
#include "sim/scenario.hpp"

namespace rumor::sim {

class SimEnv;
class InvariantChecker;

enum class PeerState : std::uint8_t { Pending, Training, Settling, Done, Crashed, Left };
const char* peer_state_name(PeerState s);

// One row of timeseries.csv.
struct Sample {
  double time = 0;
  std::uint32_t peers = 0;           // live (training or settling)
  double mean_step = 0;              // over the sampled peers
  double loss = 0, test_acc = 0;     // of the average model
  double peer_loss = 0, peer_acc = 0, peer_acc_min = 0;  // of eval_peers peers' own models
  double consensus_distance = 0;     // sqrt(mean_i |x_i - xbar|^2) / |xbar|
  double spread = 0;                 // sqrt(mean_i |x_i - xbar|^2)
  std::uint64_t bytes = 0, exchanges = 0, failed = 0, dropped = 0;
};

// The text of timeseries.csv for these rows (every algorithm writes the same columns).
std::string timeseries_csv_of(const std::vector<Sample>& samples);

// Sets r.peer_loss, r.peer_acc and r.peer_acc_min from the own models of k = min(eval_peers, n)
// of n peers, evenly spread over them (peer j n / k), each evaluated by eval(peer); NaN if k = 0.
// Sets r.mean_step, r.spread and r.consensus_distance from n models (model(i), steps(i)) and
// leaves their mean in `xbar` (double; sized to the models).
void sample_consensus(Sample& r, std::size_t n, const std::function<std::span<const float>(std::size_t)>& model,
                      const std::function<double(std::size_t)>& steps, std::vector<double>& xbar);
// Sets r.loss and r.test_acc of the mean model `xbar` (the quadratic's loss, or an evaluation
// on the test set through `scratch`).
void sample_mean_model(Sample& r, class Workload& work, bool quadratic, const std::vector<double>& xbar,
                       std::vector<float>& scratch);
void sample_peer_models(Sample& r, std::size_t eval_peers, std::size_t n,
                        const std::function<EvalResult(std::size_t)>& eval);

// What every kind of run (Simulation, AlgorithmRun) writes its outputs with (simulator.cpp;
// the JSON and formatting helpers are in sim/output.hpp).
inline constexpr const char* kEventsCsvHeader = "time,peer,event,other,clock,value,detail\n";
// DIR/timeseries.csv, DIR/events.csv and DIR/summary.json (DIR created if missing); throws
// std::runtime_error naming the path that could not be written.
void write_run_outputs(const std::string& dir, const std::string& timeseries, const std::string& events,
                       const std::string& summary);

struct Totals {
  std::uint64_t events = 0, messages = 0, bytes = 0, dropped = 0, refused = 0;
  std::uint64_t exchanges = 0, answered = 0, failed = 0, declined = 0, rejected = 0;
  std::uint64_t crashes = 0, leaves = 0, joins = 0, steps = 0;
};

class Simulation {
 public:
  // Builds the workload (loads data), the founders and the churn schedule. Throws
  // ScenarioError / DataError / std::invalid_argument with a readable reason.
  explicit Simulation(const Scenario& s);
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  // Runs to the end: run.duration, or until no event is left.
  void run();
  // Runs every event with time <= t (and the samples up to t); false once nothing is left.
  bool run_until(double t);
  // Stepping, as raft's fixture does: fires exactly one event (recording the timeseries samples
  // due before it); false once the run is over. Mixes freely with run() and run_until().
  bool step();
  // Called after every event, whichever of run(), run_until() or step() fired it: tests check
  // invariants there (tests/sim/test_invariants.cpp). One hook; a new one replaces it.
  void set_after_event(std::function<void(const Simulation&)> hook);
  double now() const;
  bool finished() const;

  // Outputs (docs/sim.md): the text of timeseries.csv, events.csv and summary.json.
  std::string timeseries_csv() const;
  std::string events_csv() const;
  std::string summary_json() const;
  // Writes the three files into `dir` (created if missing). Throws std::runtime_error.
  void write_outputs(const std::string& dir) const;

  // Inspection, for tests and studies.
  const Scenario& scenario() const;
  std::uint32_t ids() const;
  PeerState state(std::uint32_t peer) const;
  std::span<const float> params(std::uint32_t peer) const;  // empty if it has no model
  const Gossip* gossip(std::uint32_t peer) const;            // null unless running
  const PeerLoop* loop(std::uint32_t peer) const;            // null unless running
  std::uint64_t steps(std::uint32_t peer) const;
  // Mean parameters (in double) over the peers a sample would use; their count in `n`.
  std::vector<double> mean_params(std::size_t* n = nullptr) const;
  Sample sample_now();  // computed now (not recorded)
  const std::vector<Sample>& samples() const;
  // Every message sent and not yet handled (on the wire, or queued at a busy receiver), with
  // its sender and receiver: invariant checks account for exchanges half applied.
  void for_each_message_in_flight(const std::function<void(const PeerId& from, const PeerId& to, const Message&)>& f) const;
  // events.csv grows as the run goes: its length now, and the rows written from `offset` on.
  std::size_t events_size() const;
  std::string events_since(std::size_t offset) const;
  const Totals& totals() const;
  // Faults (sim/faults.hpp) and the invariant checker (sim/invariants.hpp).
  std::uint32_t life(std::uint32_t peer) const;      // its process: 0, then one more per restart or crash
  bool resumed(std::uint32_t peer) const;            // this life resumed from its own model (faults.restart)
  double started_at(std::uint32_t peer) const;       // when this life's process came up
  double last_heal() const;                          // when the last fault partition healed (-1: none)
  bool partitioned_now() const;                      // a fault partition is in force
  const FaultCounts& fault_counts() const;
  // Turns the checker on (before the first event; `[invariants] check = on` does it at
  // construction); null while off. Its first broken invariant goes to summary.json.
  void check_invariants();
  const InvariantChecker* invariants() const;
  InvariantChecker* invariants();
  // The noisy quadratic's closed form for n peers (docs/sim.md, check 2); 0 for other kinds.
  double quadratic_stationary_loss(std::uint32_t n) const;

 private:
  friend class SimEnv;  // the peers' Env reaches the engine
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rumor::sim
