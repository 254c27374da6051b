// Scenario files of rumor-sim: the parsed, checked description of one simulated study.
//
// Format (docs/sim.md is the reference): INI-like, one `key = value` per line, `# comments`,
// `[section]` headers (`[run]`, `[workload]`, `[gossip]`, `[network]`, `[compute]`,
// `[class.NAME]`, `[churn]`, `[output]`), an optional top-level `include = FILE` (relative to
// the including file). A later assignment of the same key replaces the earlier one (so an
// included calibration fragment or `--set section.key=value` overrides); keys that describe a
// list of things (`link`, `partition`, `straggler`, `crash`, `leave`, `join`) append instead.
//
// Contract: parsing never half-succeeds. Every unknown key, unknown section and bad value is a
// ScenarioError whose message names the place (file:line, or --set) and the key; rumor-sim
// turns it into exit code 2. Peer sets (`p0..p7`, `p1,p3`, a class name, `all`) are resolved
// against the final peer count here too, so mistakes show before any data is loaded.
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/codec.hpp"
#include "core/model.hpp"
#include "core/peer_loop.hpp"
#include "sim/faults.hpp"

namespace rumor::sim {

struct ScenarioError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class StepDist { Constant, Normal, Lognormal, Exponential };
// How compute.time_slice's turns fall (docs/sim.md "Calibration"). Random: each wait for a core
// lasts (f - 1) x time_slice x e and the turn after it time_slice x e, e ~ Exp(1) drawn for each
// pair, so the share stays 1 / f while an input that arrives during a wait waits as long as a
// real one does; periodic: time_slice on, (f - 1) x time_slice off, at a fixed phase.
enum class Turns { Random, Periodic };
// The first five are undirected and static (gossip and the synchronous algorithms); the last
// four only serve the synchronous algorithms (sim/mixing.hpp): `OnePeerExponential` changes
// every round, `DirectedExponential` is directed, `RandomRegular` is drawn from the seed,
// `RandomDirected` (d random out-neighbours each, irregular in-degrees) is for push-sum.
enum class Topology {
  Complete, Ring, Torus, Hypercube, Exponential, OnePeerExponential, DirectedExponential, RandomRegular, RandomDirected
};
// What the peers run. Gossip: core's real asynchronous protocol (sim/simulator.hpp); the others
// are the textbook algorithms it is weighed against, in rounds (sim/algorithms.hpp).
enum class Algorithm { Gossip, Dpsgd, Sgp, LocalSgd, Diloco, Centralized, AllReduce, PsSync, PsAsync, PsSsp };
enum class MixingWeights { Uniform, Metropolis };
enum class Bootstrap { Seed, Neighbours, All };
enum class WorkloadKind { Model, Quadratic };

const char* topology_name(Topology t);
const char* algorithm_name(Algorithm a);
// True for the algorithms that use a communication graph (dpsgd, sgp, gossip).
bool uses_topology(Algorithm a);

// One axis of a [sweep] grid: a scenario key (section.key) and the values it takes.
struct SweepAxis {
  std::string key;                 // the full key, shorthands resolved (`peers` -> run.peers)
  std::string label;               // as written (column names of the combined CSV)
  std::vector<std::string> values;  // as written: `VALUE` or `VALUE+KEY=V+KEY=V`
  // Per value: the axis's own assignment first (key=VALUE), then the extra ones a value
  // carries after `+` (a variant: `sgp+topology=onepeer_exp`), keys resolved.
  std::vector<std::vector<std::pair<std::string, std::string>>> assignments;
  std::string where;
};

// A set of peers by index, resolved at parse time against every id that will ever exist
// (founders + scheduled and Poisson joins).
using PeerSet = std::vector<std::uint32_t>;

struct PeerClass {
  std::string name;            // "default" when the file has no [class.*] section
  std::uint32_t count = 0;     // founders of this class (contiguous ids, in file order)
  double step_time = 0.01;     // mean seconds of one training step (or averaging tick)
  StepDist dist = StepDist::Constant;
  double sd = 0.1;             // normal: relative sd; lognormal: sigma of log (mean kept 1)
  double bandwidth = 1.25e9;   // NIC bytes/s (serialisation of outgoing messages)
  double latency = 0.0;        // extra one-way access latency of links touching this class
  double exchange_cpu = 0.0;   // seconds of CPU per payload message sent or received
  double eval_time = 0.0;      // seconds a peer evaluation (peer_evals) holds the peer
  double start = 0.0;          // seconds from (re)start to the first step (loading data)
  // What drives the peer's loop. Daemon: rumor-peer, whose compute thread drains its inputs
  // between steps (an evaluation holds them), and which settles after training. Python: a
  // script driving rumor.Peer as examples/torch_quickstart.py does: the module's responder
  // thread answers the swarm once the script has been away 20 ms (python/python_peer.cpp),
  // evaluations included; after its last step the script pauses (serve(settle, settle_max)),
  // evaluates, and closes (leaves) without settling again.
  enum class Driver { Daemon, Python } driver = Driver::Daemon;
  // The share of one core this kind of machine has (`cpu = 0.25`: a quarter; the testbed's
  // cgroup CPU cap). The parser divides step_time, exchange_cpu, eval_time and start by it, so
  // the times above are those of a whole core as written and the machine's once parsed.
  double cpu = 1.0;
  // > 0 (with cpu < 1): the cap is a CFS quota of cpu x cpu_period in every cpu_period (the
  // testbed's cgroup; the kernel's period is 100 ms): the machine computes at a whole core's
  // speed for cpu x cpu_period, then not at all until the next period, and its steps,
  // evaluations and the inputs they drain advance only in those windows (each peer's windows at
  // its own phase). 0: evenly at `cpu` of a core at every instant.
  double cpu_period = 0.0;
  bool capped_in_windows() const { return cpu_period > 0 && cpu < 1.0; }
  // `bandwidth_change = RATE@T[, RATE@T ...]`: from virtual time T on, the NIC runs at RATE
  // (bytes/s), in time order (the testbed's `tc class change` mid-run).
  struct BandwidthChange {
    double at = 0, bandwidth = 0;
  };
  std::vector<BandwidthChange> bandwidth_changes;
  // The NIC's rate at virtual time t.
  double bandwidth_at(double t) const {
    double bw = bandwidth;
    for (const auto& c : bandwidth_changes)
      if (t >= c.at) bw = c.bandwidth;
    return bw;
  }
};

struct LinkSpec {
  PeerSet a, b;                // both directions between every a and every b
  double latency = -1;         // < 0: unchanged
  double bandwidth = -1;       // < 0: unchanged
  std::string where;
};

struct PartitionSpec {
  PeerSet a, b;                // b empty at parse time means "everyone not in a" (filled in)
  double from = 0, until = 0;  // [from, until)
  std::string where;
};

struct StragglerSpec {
  PeerSet who;                 // resolved; `fraction` picks at build time from the seed
  double fraction = -1;        // >= 0: this fraction of the founders, drawn from the seed
  double at = 0, until = -1;   // until < 0: for ever
  double factor = 1;           // step time multiplier
  std::string where;
};

struct ChurnAction {
  enum class Kind { Crash, Leave, Join } kind = Kind::Crash;
  std::int64_t peer = -1;      // crash/leave: -1 = a uniformly random training peer;
                               // join: the id (a new one, or a crashed/left one: a restart)
  std::uint32_t cls = 0;       // join: class index of a new peer
  double at = 0;
  std::string where;
};

struct Scenario {
  std::string source;          // the file given on the command line
  // [algorithm] (docs/sim.md, "Algorithms")
  Algorithm algorithm = Algorithm::Gossip;
  bool atc = false;            // dpsgd: adapt-then-combine (else combine-then-adapt)
  MixingWeights weights = MixingWeights::Uniform;
  std::uint32_t degree = 4;    // topology random_regular: the degree d
  double outer_lr = 0.7, outer_momentum = 0.9;  // diloco's outer SGD
  bool outer_nesterov = true;
  double ps_staleness = 2;     // ps_ssp: the bound s on clock gaps
  double server_bandwidth = -1;  // ps_*: the server's NIC (< 0: network.bandwidth)
  std::size_t header_bytes = 64;  // the synchronous algorithms: bytes of a message besides the
                                  // 32-byte frame header and the float32 payload
  // [sweep]: the grid, in file order (empty: a single run), and what its summary measures.
  std::vector<SweepAxis> sweep;
  double sweep_target = 0.8;   // time and bytes to this test accuracy of the average model
  std::size_t sweep_parallel = 2;  // runs at once
  // [run]
  std::uint64_t seed = 1;
  double duration = 0;         // hard end of virtual time; 0 = when every peer is done
  // [workload]
  WorkloadKind workload = WorkloadKind::Model;
  bool training = true;        // false: pure averaging (peers tick, parameters never trained)
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "mlp:256,128";
  // How the model starts (he, or torch: PyTorch's default, to predict torch peers and DDP ranks).
  InitScheme init = InitScheme::He;
  std::string partition = "iid";
  std::string optimizer = "adam";
  double lr = 1e-3, momentum = 0.9, weight_decay = 0;
  std::string schedule = "constant";
  std::uint64_t warmup_steps = 0;
  double decay_fraction = 0.3;  // schedule wsd: the part of the steps that decays
  std::size_t batch = 64;
  bool same_seed = true;       // every peer's trainer uses `seed` (rumor-peer's default)
  std::size_t dim = 100;       // quadratic / averaging vector length
  double curvature_min = 1, curvature_max = 1;  // h_j log-spaced in [min, max]
  double noise = 1.0;          // quadratic: gradient noise sd
  double x0 = 1.0;             // quadratic: every coordinate's start
  // Training off: where each peer's parameters start. "model": the model's own initialisation
  // with a per-peer seed; "normal": N(init_mean, init_sd); "bits:K": init_mean + init_sd * k / 2^K
  // with k uniform in [0, 2^K) (dyadic: float averaging stays exact longer). "auto": model for
  // the model kind, normal for the quadratic.
  double init_mean = 0, init_sd = 1;
  std::string init_values = "auto";
  // The loop's knobs (core/knobs.hpp: the same table as rumor-peer's flags, keys
  // `section.name`: run.settle, workload.epochs, gossip.local_steps, output.eval_every, ...),
  // with core's defaults. The stop rules: workload.epochs (5 by default), workload.steps,
  // workload.duration; with none given, a run with run.duration (or without training) runs
  // until then.
  LoopSettings loop;
  // [gossip], the simulator's own
  Topology topology = Topology::Complete;
  Bootstrap bootstrap = Bootstrap::Seed;
  bool fetch_state = true;           // joiners fetch the swarm's model (state transfer)
  // [network]
  double latency = 50e-6;      // one-way base latency of every link
  double jitter = 0;           // mean of an exponential extra delay per message
  double loss = 0;             // probability a message vanishes
  double refused_after = -1;   // < 0: two link latencies (a refused TCP connect)
  // On: a class's bandwidth limits what its peers receive too (the testbed shapes both ends of
  // every link): a message moves at the slower end's rate, and a receiver takes one message at
  // a time, as a sender does. Off (default): only the sender's NIC (and link lines) limit it.
  bool limit_receive = false;
  std::vector<LinkSpec> links;
  std::vector<PartitionSpec> partitions;
  // [compute] defaults and [class.*]
  double mid_fraction = 0.9;   // where in a step the mid-step boundary lies
  // > 0: every peer runs on one machine with this many cores (the quickstart: 4 peers, 2
  // cores): a step, its exchange CPU and an evaluation take longer by the peer's fair share
  // of the cores, max(1, W / (335 cores)), W = the scheduler weights of what runs: 335 for a
  // peer training or evaluating (rumor-peer's compute thread is at nice 5; a settling one only
  // while it is not waiting between exchanges), 1024 for
  // one loading its data (nice 0). docs/sim.md.
  double shared_cores = 0;
  // > 0 (with shared_cores): the cores are shared by time slices, not evenly at every instant.
  // A peer slowed by a factor f runs for time_slice, then waits (f - 1) x time_slice, and its
  // steps and evaluations advance only while it runs; inputs that arrive while it waits are
  // handled after. (The kernel's tick here: 4 ms on, 4 ms off with 4 busy threads on 2 cores;
  // `rumor-sim --calibrate` measures it.) 0: every peer advances at 1/f all the time.
  double time_slice = 0;
  // compute.turns: whether the turns come at random (the default: the kernel's, with other
  // threads waking, are irregular) or like clockwork.
  Turns turns = Turns::Random;
  std::vector<PeerClass> classes;
  std::vector<StragglerSpec> stragglers;
  // [churn]
  std::vector<ChurnAction> churn;  // explicit and Poisson, sorted by time
  std::uint32_t founders = 0;      // peers at t = 0
  std::uint32_t total_ids = 0;     // founders + every join that creates a new id
  // [output]
  double sample_every = 1.0;
  std::size_t eval_peers = 4;
  std::size_t eval_rows = 0;       // 0 = the whole test set
  bool peer_evals = false;         // per-peer evaluations at the daemon's points (loop.eval_every)
  // With peer_evals: the peers that also evaluate during training (nullopt: all); the others
  // evaluate once, at the end, as Python peers other than the reporting one do.
  std::optional<PeerSet> train_evals;
  bool log_exchanges = false, log_views = false;
  // [faults] (sim/faults.hpp, docs/testing.md): fault points, all off by default.
  FaultSettings faults;
  // [invariants] check = on: the invariant checker (sim/invariants.hpp) runs after every event
  // and the first broken invariant goes to summary.json (and fails rumor-sim with exit code 3).
  bool check_invariants = false;
};

// Parses `path` with `overrides` ("section.key=value", applied last, in order; rumor-sim's
// --seed S is the override run.seed=S). Throws ScenarioError.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides);
// The same from text (tests); `name` stands for the file in messages, includes are relative
// to `base_dir`.
Scenario parse_scenario(const std::string& text, const std::string& name,
                        const std::vector<std::string>& overrides, const std::string& base_dir = ".");

// Values with units: durations ("10ms", "2.5", "1min"), bandwidths ("1Gbit", "100MB", "3e8").
// Throw ScenarioError naming `where` and `key`.
double parse_duration(const std::string& v, const std::string& where, const std::string& key);
double parse_bandwidth(const std::string& v, const std::string& where, const std::string& key);

}  // namespace rumor::sim
