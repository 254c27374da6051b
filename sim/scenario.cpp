// Scenario parsing: text -> raw (key, value, place) entries -> a checked Scenario.
//
// Two passes on purpose: the raw pass (the INI reader, ini.hpp) knows the syntax (sections,
// includes, --set) and nothing of the meaning; the typed pass, here, looks every key up in one
// table of known keys, so an unknown key is found wherever it is, and each value is converted
// with the place it came from at hand for the error message. Two parts of the typed pass have
// their own files: the [sweep] axes (scenario_sweep.cpp) and the Poisson churn draws (churn.cpp).
#include "sim/scenario.hpp"

#include "core/knobs.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/rng.hpp"
#include "data/partition.hpp"
#include "sim/churn.hpp"
#include "sim/ini.hpp"
#include "sim/scenario_sweep.hpp"
#include "sim/streams.hpp"

namespace rumor::sim {

const char* topology_name(Topology t) {
  switch (t) {
    case Topology::Complete: return "complete";
    case Topology::Ring: return "ring";
    case Topology::Torus: return "torus";
    case Topology::Hypercube: return "hypercube";
    case Topology::Exponential: return "exponential";
    case Topology::OnePeerExponential: return "onepeer_exp";
    case Topology::DirectedExponential: return "directed_exp";
    case Topology::RandomRegular: return "random_regular";
    case Topology::RandomDirected: return "random_directed";
  }
  return "?";
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Gossip: return "gossip";
    case Algorithm::Dpsgd: return "dpsgd";
    case Algorithm::Sgp: return "sgp";
    case Algorithm::LocalSgd: return "local_sgd";
    case Algorithm::Diloco: return "diloco";
    case Algorithm::Centralized: return "centralized";
    case Algorithm::AllReduce: return "allreduce";
    case Algorithm::PsSync: return "ps_sync";
    case Algorithm::PsAsync: return "ps_async";
    case Algorithm::PsSsp: return "ps_ssp";
  }
  return "?";
}

bool uses_topology(Algorithm a) { return a == Algorithm::Gossip || a == Algorithm::Dpsgd || a == Algorithm::Sgp; }

// The known sections and keys (declared in ini.hpp: the raw pass checks every key against them).
// Keys of list kind append; all others keep the last value.
namespace ini {
const std::set<std::string> kListKeys = {"network.link", "network.partition", "compute.straggler",
                                         "churn.crash", "churn.leave", "churn.join"};
const std::set<std::string> kClassKeys = {"count", "step_time", "dist", "sd", "bandwidth", "latency",
                                          "exchange_cpu", "eval_time", "start", "cpu", "cpu_period", "bandwidth_change",
                                          "driver"};
// The loop's knobs join their sections from core's table (core/knobs.hpp), with the older
// spelling of a key where one is still read.
std::map<std::string, std::set<std::string>> with_loop_knobs(std::map<std::string, std::set<std::string>> keys) {
  for (const Knob& k : loop_knobs()) {
    if (!(k.scope & Knob::kSim)) continue;
    keys[k.section].insert(k.name);
    if (k.legacy_key) {
      const std::string legacy = k.legacy_key;
      const auto dot = legacy.find('.');
      keys[legacy.substr(0, dot)].insert(legacy.substr(dot + 1));
    }
  }
  return keys;
}

const std::map<std::string, std::set<std::string>> kKeys = with_loop_knobs({
    {"run", {"seed", "duration", "peers"}},
    {"algorithm", {"kind", "combine", "weights", "degree", "outer_lr", "outer_momentum", "nesterov", "staleness",
                   "server_bandwidth", "header_bytes"}},
    {"workload", {"kind", "training", "data", "model", "init", "partition", "optimizer", "lr", "momentum", "weight_decay",
                  "schedule", "warmup_steps", "decay_fraction", "batch", "peer_seeds", "dim",
                  "curvature", "noise", "x0", "init_mean", "init_sd", "init_values"}},
    {"gossip", {"topology", "bootstrap", "fetch_state"}},
    {"network", {"latency", "bandwidth", "jitter", "loss", "refused_after", "link", "partition", "limit_receive"}},
    {"compute", {"step_time", "dist", "sd", "exchange_cpu", "eval_time", "start", "mid", "straggler", "shared_cores", "time_slice", "turns", "cpu", "cpu_period", "driver"}},
    {"churn", {"crash", "leave", "join", "crash_rate", "leave_rate", "join_rate", "from", "until", "join_class"}},
    {"faults", fault_keys()},
    {"invariants", {"check"}},
    {"output", {"sample_every", "eval_peers", "eval_rows", "peer_evals", "train_evals", "log_exchanges", "log_views"}},
});
}  // namespace ini

namespace {

using ini::convert;
using ini::fail;
using ini::kClassKeys;
using ini::kKeys;
using ini::kListKeys;
using ini::Raw;
using ini::RawValue;
using ini::to_number;
using ini::trim;
using ini::words;

// The typed pass.
class Builder {
 public:
  explicit Builder(const Raw& r) : r_(r) {}

  Scenario build(const std::string& source) {
    Scenario s;
    s.source = source;
    run(s);
    algorithm(s);
    workload(s);
    loop(s);
    gossip(s);
    compute_and_classes(s);
    network(s);
    churn(s);
    resolve_sets(s);
    output(s);
    check_algorithm(s);
    read_sweep(r_, s);
    read_faults(r_, s);
    return s;
  }

 private:
  const Raw& r_;
  // Peer-set texts kept until every id is known.
  struct PendingSet {
    std::string text, where, key;
    PeerSet* out;
    bool allow_empty = false;
  };
  std::vector<PendingSet> pending_;
  std::vector<std::uint32_t> joiner_class_;  // class of every id past the founders

  template <class T>
  bool get(const std::string& key, T& out) {
    const RawValue* v = r_.last(key);
    if (!v) return false;
    convert(v->value, v->where, key, out);
    return true;
  }
  bool dur(const std::string& key, double& out) {
    const RawValue* v = r_.last(key);
    if (!v) return false;
    out = parse_duration(v->value, v->where, key);
    return true;
  }
  bool bw(const std::string& key, double& out) {
    const RawValue* v = r_.last(key);
    if (!v) return false;
    out = parse_bandwidth(v->value, v->where, key);
    return true;
  }
  template <class E>
  bool choice(const std::string& key, E& out, const std::vector<std::pair<std::string, E>>& options) {
    const RawValue* v = r_.last(key);
    if (!v) return false;
    for (const auto& [name, e] : options)
      if (v->value == name) {
        out = e;
        return true;
      }
    std::string known;
    for (const auto& [name, e] : options) known += (known.empty() ? "" : ", ") + name;
    fail(v->where, key, "'" + v->value + "' is not one of " + known);
  }
  void positive(const std::string& key, double x, bool allow_zero = false) {
    if (x < 0 || (!allow_zero && x == 0)) {
      const RawValue* v = r_.last(key);
      fail(v ? v->where : "scenario", key, allow_zero ? "must be >= 0" : "must be > 0");
    }
  }
  std::string where_of(const std::string& key) const {
    const RawValue* v = r_.last(key);
    return v ? v->where : "scenario";
  }

  void run(Scenario& s) {
    get("run.seed", s.seed);
    dur("run.duration", s.duration);
  }

  // The loop's knobs, read through core's table: the same parser, ranges and messages as
  // rumor-peer's flags.
  void loop(Scenario& s) {
    const auto given = [&](const Knob& k) -> const RawValue* {
      if (const RawValue* v = r_.last(knob_key(k))) return v;
      return k.legacy_key ? r_.last(k.legacy_key) : nullptr;
    };
    for (const Knob& k : loop_knobs()) {
      if (!(k.scope & Knob::kSim)) continue;
      if (const RawValue* v = given(k)) {
        try {
          set_knob(k, s.loop, v->value);
        } catch (const KnobError& e) {
          fail(v->where, knob_key(k), e.what());
        }
      }
    }
    // The stop rules: an explicit step or time budget replaces the default epochs (as
    // rumor-peer's flags); with none given, a run with a run.duration, or one that does not
    // train, goes on until then (the simulator checks that something ends it).
    const bool epochs = given(*find_knob("epochs")) != nullptr;
    const bool budget = given(*find_knob("steps")) || given(*find_knob("duration")) ||
                        given(*find_knob("swarm_epochs")) || given(*find_knob("swarm_samples"));
    apply_stop_precedence(s.loop, epochs, budget);
    if (!epochs && !budget && (s.duration > 0 || s.workload != WorkloadKind::Model || !s.training)) s.loop.epochs = 0;
  }

  void algorithm(Scenario& s) {
    choice("algorithm.kind", s.algorithm,
           {{"gossip", Algorithm::Gossip}, {"dpsgd", Algorithm::Dpsgd}, {"sgp", Algorithm::Sgp},
            {"local_sgd", Algorithm::LocalSgd}, {"diloco", Algorithm::Diloco}, {"centralized", Algorithm::Centralized},
            {"allreduce", Algorithm::AllReduce}, {"ps", Algorithm::PsSync}, {"ps_sync", Algorithm::PsSync},
            {"ps_async", Algorithm::PsAsync}, {"ps_ssp", Algorithm::PsSsp}});
    if (const RawValue* v = r_.last("algorithm.combine")) {
      if (v->value == "cta") s.atc = false;
      else if (v->value == "atc") s.atc = true;
      else fail(v->where, "algorithm.combine", "'" + v->value + "' is not one of cta, atc");
    }
    choice("algorithm.weights", s.weights, {{"uniform", MixingWeights::Uniform}, {"metropolis", MixingWeights::Metropolis}});
    if (get("algorithm.degree", s.degree) && s.degree < 1)
      fail(where_of("algorithm.degree"), "algorithm.degree", "must be >= 1");
    if (get("algorithm.outer_lr", s.outer_lr)) positive("algorithm.outer_lr", s.outer_lr);
    if (get("algorithm.outer_momentum", s.outer_momentum) && !(s.outer_momentum >= 0 && s.outer_momentum < 1))
      fail(where_of("algorithm.outer_momentum"), "algorithm.outer_momentum", "must lie in [0, 1)");
    get("algorithm.nesterov", s.outer_nesterov);
    if (const RawValue* v = r_.last("algorithm.staleness")) {
      if (v->value == "inf" || v->value == "infinity") {
        s.ps_staleness = INFINITY;
      } else {
        std::uint64_t k = 0;
        convert(v->value, v->where, "algorithm.staleness", k);
        s.ps_staleness = static_cast<double>(k);
      }
    }
    bw("algorithm.server_bandwidth", s.server_bandwidth);
    get("algorithm.header_bytes", s.header_bytes);
  }

  // What only gossip simulates (churn, faults, codecs) is refused for the other algorithms
  // rather than silently ignored; the new topologies are refused for gossip.
  void check_algorithm(Scenario& s) {
    const std::string alg = std::string("algorithm.kind = ") + algorithm_name(s.algorithm);
    const std::string aw = where_of("algorithm.kind");
    if (const std::string why = knob_conflicts(s.loop); !why.empty()) fail(where_of("gossip.fragments"), "gossip.fragments", why);
    if (s.algorithm == Algorithm::Gossip) {
      if (s.topology == Topology::OnePeerExponential || s.topology == Topology::DirectedExponential ||
          s.topology == Topology::RandomRegular || s.topology == Topology::RandomDirected)
        fail(where_of("gossip.topology"), "gossip.topology",
             std::string(topology_name(s.topology)) + " is for the synchronous algorithms (algorithm.kind = dpsgd or sgp); "
             "gossip takes complete, ring, torus, hypercube or exponential");
      return;
    }
    if (!s.churn.empty()) fail(aw, "churn", alg + ": churn is only simulated for gossip");
    if (!s.partitions.empty()) fail(aw, "network.partition", alg + ": partitions are only simulated for gossip");
    if (s.loss > 0) fail(aw, "network.loss", alg + ": message loss is only simulated for gossip");
    if (s.loop.gossip.codec != PayloadCodec::None) fail(aw, "gossip.codec", alg + ": the synchronous algorithms send float32 (codec none)");
    if (s.loop.gossip.fragments != 1) fail(aw, "gossip.fragments", alg + ": the synchronous algorithms average the whole model (fragments 1)");
    if (s.shared_cores > 0) fail(aw, "compute.shared_cores", alg + ": shared cores are only simulated for gossip");
    // auto (the default) chooses H from a peer's own round trips; the rounds' algorithms have
    // none: unset, a round follows every step; given, it is refused.
    if (s.loop.gossip.local_steps == 0) {
      if (r_.last("gossip.local_steps"))
        fail(where_of("gossip.local_steps"), "gossip.local_steps",
             alg + ": local_steps = auto is only simulated for gossip (give the rounds' period)");
      s.loop.gossip.local_steps = 1;
    }
    if (s.peer_evals && (s.algorithm == Algorithm::PsAsync || s.algorithm == Algorithm::PsSsp))
      fail(aw, "output.peer_evals", alg + ": per-worker evaluations are simulated for gossip and the round algorithms, "
           "not for the asynchronous parameter servers");
    const std::uint32_t n = s.founders;
    if (uses_topology(s.algorithm)) {
      if (s.topology == Topology::RandomRegular && (s.degree >= n || (static_cast<std::uint64_t>(n) * s.degree) % 2 != 0))
        fail(where_of("algorithm.degree"), "algorithm.degree",
             "a random d-regular graph needs d < peers and peers * d even (d " + std::to_string(s.degree) + ", peers " +
                 std::to_string(n) + ")");
      if (s.topology == Topology::RandomDirected && s.degree >= n)
        fail(where_of("algorithm.degree"), "algorithm.degree", "random_directed needs degree < peers");
      if (s.topology == Topology::RandomDirected && s.algorithm == Algorithm::Dpsgd)
        fail(where_of("gossip.topology"), "gossip.topology",
             "random_directed has uneven in-degrees, so no doubly stochastic D-PSGD matrix: use algorithm.kind = sgp");
      const bool directed = s.topology == Topology::OnePeerExponential || s.topology == Topology::DirectedExponential ||
                            s.topology == Topology::RandomDirected;
      if (s.algorithm == Algorithm::Dpsgd && s.weights == MixingWeights::Metropolis && directed)
        fail(where_of("algorithm.weights"), "algorithm.weights",
             "Metropolis-Hastings weights need an undirected topology, not " + std::string(topology_name(s.topology)));
    }
    if (s.algorithm == Algorithm::PsSsp && !std::isfinite(s.ps_staleness))
      fail(where_of("algorithm.staleness"), "algorithm.staleness", "ps_ssp needs a finite bound (ps_async is s = inf)");
  }

  void workload(Scenario& s) {
    choice("workload.kind", s.workload, {{"model", WorkloadKind::Model}, {"quadratic", WorkloadKind::Quadratic}});
    get("workload.training", s.training);
    get("workload.data", s.data);
    get("workload.model", s.model);
    std::vector<std::pair<std::string, InitScheme>> inits;
    for (const InitSchemeName& i : init_schemes()) inits.emplace_back(i.name, i.scheme);
    choice("workload.init", s.init, inits);
    get("workload.partition", s.partition);
    get("workload.optimizer", s.optimizer);
    get("workload.lr", s.lr);
    positive("workload.lr", s.lr);
    get("workload.momentum", s.momentum);
    get("workload.weight_decay", s.weight_decay);
    get("workload.schedule", s.schedule);
    get("workload.warmup_steps", s.warmup_steps);
    get("workload.decay_fraction", s.decay_fraction);
    if (!(s.decay_fraction >= 0 && s.decay_fraction <= 1))
      fail(where_of("workload.decay_fraction"), "workload.decay_fraction", "must be in [0, 1]");
    get("workload.batch", s.batch);
    if (s.batch == 0) fail(where_of("workload.batch"), "workload.batch", "must be >= 1");
    if (const RawValue* v = r_.last("workload.peer_seeds")) {
      if (v->value == "same") s.same_seed = true;
      else if (v->value == "distinct") s.same_seed = false;
      else fail(v->where, "workload.peer_seeds", "'" + v->value + "' is not one of same, distinct");
    }
    get("workload.dim", s.dim);
    if (s.dim == 0) fail(where_of("workload.dim"), "workload.dim", "must be >= 1");
    if (const RawValue* v = r_.last("workload.curvature")) {
      const auto dots = v->value.find("..");
      if (dots == std::string::npos) {
        s.curvature_min = s.curvature_max = to_number(v->value, v->where, "workload.curvature", nullptr);
      } else {
        s.curvature_min = to_number(trim(v->value.substr(0, dots)), v->where, "workload.curvature", nullptr);
        s.curvature_max = to_number(trim(v->value.substr(dots + 2)), v->where, "workload.curvature", nullptr);
      }
      if (!(s.curvature_min > 0) || s.curvature_max < s.curvature_min)
        fail(v->where, "workload.curvature", "expected H or HMIN..HMAX with 0 < HMIN <= HMAX");
    }
    get("workload.noise", s.noise);
    positive("workload.noise", s.noise, true);
    get("workload.x0", s.x0);
    get("workload.init_mean", s.init_mean);
    get("workload.init_sd", s.init_sd);
    if (const RawValue* v = r_.last("workload.init_values")) {
      s.init_values = v->value;
      bool ok = v->value == "normal" || v->value == "model" || v->value == "auto";
      if (v->value.rfind("bits:", 0) == 0) {
        unsigned k = 0;
        convert(v->value.substr(5), v->where, "workload.init_values", k);
        ok = k >= 1 && k <= 20;
      }
      if (!ok) fail(v->where, "workload.init_values", "expected auto, model, normal or bits:K (1 <= K <= 20), got '" + v->value + "'");
    }
    if (s.init_values == "auto") s.init_values = s.workload == WorkloadKind::Model ? "model" : "normal";
    if (s.init_values == "model" && s.workload != WorkloadKind::Model)
      fail(where_of("workload.init_values"), "workload.init_values", "`model` needs workload.kind = model");
    if (s.workload == WorkloadKind::Model) {
      // Reject a bad partition or optimizer here rather than deep in the build.
      try {
        (void)Partition::parse(s.partition);
      } catch (const DataError&) {
        fail(where_of("workload.partition"), "workload.partition",
             "expected iid, dirichlet:ALPHA (ALPHA > 0) or labels:K (K >= 1), got '" + s.partition + "'");
      }
      if (s.optimizer != "adam" && s.optimizer != "adamw" && s.optimizer != "sgd")
        fail(where_of("workload.optimizer"), "workload.optimizer", "expected adam, adamw or sgd, got '" + s.optimizer + "'");
    }
    if (s.schedule != "constant" && s.schedule != "warmup" && s.schedule != "cosine" && s.schedule != "wsd")
      fail(where_of("workload.schedule"), "workload.schedule", "expected constant, warmup, cosine or wsd");
  }

  void gossip(Scenario& s) {
    choice("gossip.topology", s.topology,
           {{"complete", Topology::Complete}, {"ring", Topology::Ring}, {"torus", Topology::Torus},
            {"hypercube", Topology::Hypercube}, {"exponential", Topology::Exponential}, {"exp", Topology::Exponential},
            {"onepeer_exp", Topology::OnePeerExponential}, {"onepeer", Topology::OnePeerExponential},
            {"directed_exp", Topology::DirectedExponential}, {"random_regular", Topology::RandomRegular},
            {"random_directed", Topology::RandomDirected}});
    choice("gossip.bootstrap", s.bootstrap,
           {{"seed", Bootstrap::Seed}, {"neighbours", Bootstrap::Neighbours}, {"all", Bootstrap::All}});
    get("gossip.fetch_state", s.fetch_state);
  }

  void class_keys(const std::string& prefix, PeerClass& c) {
    if (dur(prefix + "step_time", c.step_time)) positive(prefix + "step_time", c.step_time);
    choice(prefix + "dist", c.dist,
           {{"constant", StepDist::Constant}, {"normal", StepDist::Normal}, {"lognormal", StepDist::Lognormal},
            {"exponential", StepDist::Exponential}});
    if (get(prefix + "sd", c.sd)) positive(prefix + "sd", c.sd, true);
    bw(prefix + "bandwidth", c.bandwidth);
    dur(prefix + "latency", c.latency);
    dur(prefix + "exchange_cpu", c.exchange_cpu);
    dur(prefix + "eval_time", c.eval_time);
    dur(prefix + "start", c.start);
    choice(prefix + "driver", c.driver, {{"daemon", PeerClass::Driver::Daemon}, {"python", PeerClass::Driver::Python}});
    if (get(prefix + "cpu", c.cpu) && !(c.cpu > 0 && c.cpu <= 1024))
      fail(where_of(prefix + "cpu"), prefix + "cpu", "a share of one core: > 0 (0.25 is a quarter of a core)");
    if (dur(prefix + "cpu_period", c.cpu_period)) positive(prefix + "cpu_period", c.cpu_period, true);
    if (const RawValue* v = r_.last(prefix + "bandwidth_change")) {
      // "RATE@T[, RATE@T ...]", times increasing
      c.bandwidth_changes.clear();
      std::size_t start = 0;
      while (start <= v->value.size()) {
        const auto comma = v->value.find(',', start);
        const std::string item = trim(v->value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        start = comma == std::string::npos ? v->value.size() + 1 : comma + 1;
        const auto at = item.find('@');
        if (at == std::string::npos)
          fail(v->where, prefix + "bandwidth_change", "expected `RATE@T[, RATE@T ...]` (e.g. 20Mbit@10s), got '" + item + "'");
        PeerClass::BandwidthChange ch;
        ch.bandwidth = parse_bandwidth(trim(item.substr(0, at)), v->where, prefix + "bandwidth_change");
        ch.at = parse_duration(trim(item.substr(at + 1)), v->where, prefix + "bandwidth_change");
        if (!(ch.bandwidth > 0)) fail(v->where, prefix + "bandwidth_change", "a rate must be > 0");
        if (!c.bandwidth_changes.empty() && ch.at <= c.bandwidth_changes.back().at)
          fail(v->where, prefix + "bandwidth_change", "the times must increase");
        c.bandwidth_changes.push_back(ch);
      }
    }
  }

  void compute_and_classes(Scenario& s) {
    PeerClass def;
    def.name = "default";
    bw("network.bandwidth", def.bandwidth);
    class_keys("compute.", def);
    if (get("compute.mid", s.mid_fraction) && !(s.mid_fraction > 0 && s.mid_fraction < 1))
      fail(where_of("compute.mid"), "compute.mid", "must lie strictly between 0 and 1");
    if (get("compute.shared_cores", s.shared_cores)) positive("compute.shared_cores", s.shared_cores, true);
    if (dur("compute.time_slice", s.time_slice)) positive("compute.time_slice", s.time_slice, true);
    choice("compute.turns", s.turns, {{"random", Turns::Random}, {"periodic", Turns::Periodic}});
    std::uint32_t peers = 0;
    const bool have_peers = get("run.peers", peers);
    if (r_.class_order.empty()) {
      if (!have_peers) fail(s.source, "run.peers", "missing: give [run] peers = N or [class.NAME] sections with count = N");
      def.count = peers;
      s.classes.push_back(def);
    } else {
      std::uint32_t total = 0;
      for (const auto& name : r_.class_order) {
        PeerClass c = def;
        c.name = name;
        const std::string prefix = "class." + name + ".";
        if (!get(prefix + "count", c.count)) fail(s.source, prefix + "count", "missing (every class needs a count, 0 allowed)");
        class_keys(prefix, c);
        total += c.count;
        s.classes.push_back(c);
      }
      if (have_peers && peers != total)
        fail(where_of("run.peers"), "run.peers", std::to_string(peers) + " does not match the classes' counts (" +
                                                    std::to_string(total) + ")");
    }
    for (auto& c : s.classes) {
      // The machine's share of a core stretches everything it computes (class `cpu`).
      c.step_time /= c.cpu;
      c.exchange_cpu /= c.cpu;
      c.eval_time /= c.cpu;
      c.start /= c.cpu;
    }
    for (const auto& c : s.classes) s.founders += c.count;
    if (s.founders == 0) fail(where_of("run.peers"), "run.peers", "the swarm needs at least one founding peer");
    if (s.founders > 1000000) fail(where_of("run.peers"), "run.peers", "more than 1,000,000 peers");
  }

  // "SET at T x F [until T2]" / "FRAC% at T x F [until T2]"
  void stragglers(Scenario& s) {
    for (const RawValue& v : r_.all("compute.straggler")) {
      const auto w = words(v.value);
      StragglerSpec st;
      st.where = v.where;
      std::size_t i = 0;
      const auto usage = [&] {
        fail(v.where, "compute.straggler", "expected `SET at T x FACTOR [until T2]` or `FRACTION% at T x FACTOR [until T2]`, got '" + v.value + "'");
      };
      if (w.size() < 4) usage();
      const std::string who = w[i++];
      if (w[i++] != "at") usage();
      st.at = parse_duration(w[i++], v.where, "compute.straggler");
      std::string f = w[i++];
      if (f == "x") {
        if (i >= w.size()) usage();
        f = w[i++];
      } else if (f.size() > 1 && f[0] == 'x') {
        f = f.substr(1);
      } else {
        usage();
      }
      st.factor = to_number(f, v.where, "compute.straggler", nullptr);
      if (!(st.factor > 0)) fail(v.where, "compute.straggler", "the factor must be > 0");
      if (i < w.size()) {
        if (w[i++] != "until" || i >= w.size()) usage();
        st.until = parse_duration(w[i++], v.where, "compute.straggler");
        if (st.until <= st.at) fail(v.where, "compute.straggler", "`until` must come after `at`");
      }
      if (i != w.size()) usage();
      s.stragglers.push_back(st);
      if (!who.empty() && who.back() == '%') {
        const double pct = to_number(who.substr(0, who.size() - 1), v.where, "compute.straggler", nullptr);
        if (pct < 0 || pct > 100) fail(v.where, "compute.straggler", "a fraction is 0% to 100%");
        s.stragglers.back().fraction = pct / 100.0;
      } else {
        pending_.push_back({who, v.where, "compute.straggler", nullptr});
        pending_stragglers_.push_back({s.stragglers.size() - 1, pending_.size() - 1});
      }
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> pending_stragglers_;  // (straggler, pending set)

  void network(Scenario& s) {
    dur("network.latency", s.latency);
    dur("network.jitter", s.jitter);
    if (get("network.loss", s.loss) && (s.loss < 0 || s.loss >= 1))
      fail(where_of("network.loss"), "network.loss", "a probability in [0, 1)");
    dur("network.refused_after", s.refused_after);
    get("network.limit_receive", s.limit_receive);
    for (const RawValue& v : r_.all("network.link")) {
      // "A | B latency=.. bandwidth=.."
      const auto bar = v.value.find('|');
      if (bar == std::string::npos) fail(v.where, "network.link", "expected `SET | SET latency=T bandwidth=B`, got '" + v.value + "'");
      const auto left = words(v.value.substr(0, bar)), right = words(v.value.substr(bar + 1));
      if (left.size() != 1 || right.empty()) fail(v.where, "network.link", "expected `SET | SET latency=T bandwidth=B`, got '" + v.value + "'");
      LinkSpec l;
      l.where = v.where;
      for (std::size_t i = 1; i < right.size(); ++i) {
        const auto eq = right[i].find('=');
        const std::string k = right[i].substr(0, eq), val = eq == std::string::npos ? "" : right[i].substr(eq + 1);
        if (k == "latency") l.latency = parse_duration(val, v.where, "network.link latency");
        else if (k == "bandwidth") l.bandwidth = parse_bandwidth(val, v.where, "network.link bandwidth");
        else fail(v.where, "network.link", "unknown link property '" + right[i] + "' (latency=T, bandwidth=B)");
      }
      if (l.latency < 0 && l.bandwidth < 0) fail(v.where, "network.link", "give latency=T and/or bandwidth=B");
      s.links.push_back(l);
      link_sets_.push_back({left[0], right[0], v.where});
    }
    for (const RawValue& v : r_.all("network.partition")) {
      // "A [| B] from T1 to T2"
      const auto w = words(v.value);
      const auto usage = [&] {
        fail(v.where, "network.partition", "expected `SET [| SET] from T1 to T2`, got '" + v.value + "'");
      };
      PartitionSpec p;
      p.where = v.where;
      std::size_t i = 0;
      std::string a, b;
      if (w.empty()) usage();
      a = w[i++];
      if (i < w.size() && w[i] == "|") {
        ++i;
        if (i >= w.size()) usage();
        b = w[i++];
      }
      if (i + 4 != w.size() || w[i] != "from" || (w[i + 2] != "to" && w[i + 2] != "until")) usage();
      p.from = parse_duration(w[i + 1], v.where, "network.partition");
      p.until = parse_duration(w[i + 3], v.where, "network.partition");
      if (p.until <= p.from) fail(v.where, "network.partition", "the window must end after it starts");
      s.partitions.push_back(p);
      partition_sets_.push_back({a, b, v.where});
    }
  }
  struct TwoSets {
    std::string a, b, where;
  };
  std::vector<TwoSets> link_sets_, partition_sets_;

  std::uint32_t class_index(const std::string& name, const std::string& where, const std::string& key, const Scenario& s) {
    for (std::size_t i = 0; i < s.classes.size(); ++i)
      if (s.classes[i].name == name) return static_cast<std::uint32_t>(i);
    std::string known;
    for (const auto& c : s.classes) known += (known.empty() ? "" : ", ") + c.name;
    fail(where, key, "no class named '" + name + "' (classes: " + known + ")");
  }

  static std::int64_t peer_index(const std::string& w) {
    if (w.size() < 2 || w[0] != 'p') return -1;
    std::int64_t x = 0;
    auto [p, ec] = std::from_chars(w.data() + 1, w.data() + w.size(), x);
    return ec == std::errc() && p == w.data() + w.size() ? x : -1;
  }

  void churn(Scenario& s) {
    std::vector<ChurnAction> acts;
    std::uint32_t next_id = s.founders;
    std::uint32_t join_class = 0;
    if (const RawValue* v = r_.last("churn.join_class")) join_class = class_index(v->value, v->where, "churn.join_class", s);
    struct JoinSpec {
      double at;
      std::int64_t peer;
      std::uint32_t count, cls;
      std::string where;
    };
    std::vector<JoinSpec> joins;
    for (const char* kind : {"crash", "leave"}) {
      for (const RawValue& v : r_.all(std::string("churn.") + kind)) {
        const auto w = words(v.value);
        const std::string key = std::string("churn.") + kind;
        if (w.size() != 3 || w[1] != "at")
          fail(v.where, key, std::string("expected `PEER at T` or `random at T`, got '") + v.value + "'");
        ChurnAction a;
        a.kind = kind[0] == 'c' ? ChurnAction::Kind::Crash : ChurnAction::Kind::Leave;
        a.at = parse_duration(w[2], v.where, key);
        a.where = v.where;
        if (w[0] != "random") {
          a.peer = peer_index(w[0]);
          if (a.peer < 0) fail(v.where, key, "'" + w[0] + "' is not a peer id (p0, p1, ...) or random");
        }
        acts.push_back(a);
      }
    }
    for (const RawValue& v : r_.all("churn.join")) {
      // "[COUNT|PEER] at T [class NAME]"
      const auto w = words(v.value);
      const auto usage = [&] {
        fail(v.where, "churn.join", "expected `[COUNT|PEER] at T [class NAME]`, got '" + v.value + "'");
      };
      std::size_t i = 0;
      JoinSpec j{0, -1, 1, join_class, v.where};
      if (w.empty()) usage();
      if (w[0] != "at") {
        if (w[0][0] == 'p') {
          j.peer = peer_index(w[0]);
          if (j.peer < 0) usage();
        } else {
          convert(w[0], v.where, "churn.join", j.count);
          if (j.count == 0) fail(v.where, "churn.join", "the count must be >= 1");
        }
        ++i;
      }
      if (i + 2 > w.size() || w[i] != "at") usage();
      j.at = parse_duration(w[i + 1], v.where, "churn.join");
      i += 2;
      if (i < w.size()) {
        if (i + 2 != w.size() || w[i] != "class") usage();
        j.cls = class_index(w[i + 1], v.where, "churn.join", s);
      }
      joins.push_back(j);
    }
    // Poisson rates: every time drawn now, from the seed, so the set of ids is known.
    double rates[3] = {0, 0, 0};
    get("churn.crash_rate", rates[0]);
    get("churn.leave_rate", rates[1]);
    get("churn.join_rate", rates[2]);
    double from = 0, until = s.duration;
    dur("churn.from", from);
    dur("churn.until", until);
    const char* rate_keys[3] = {"churn.crash_rate", "churn.leave_rate", "churn.join_rate"};
    Rng rng = Rng(s.seed).fork(streams::kPoisson);
    for (int k = 0; k < 3; ++k) {
      if (rates[k] < 0) fail(where_of(rate_keys[k]), rate_keys[k], "a rate must be >= 0");
      if (rates[k] == 0) continue;
      if (!(until > from))
        fail(where_of(rate_keys[k]), rate_keys[k], "a Poisson rate needs a window: set run.duration or churn.until after churn.from");
      if (rates[k] * (until - from) > 1e6) fail(where_of(rate_keys[k]), rate_keys[k], "more than a million churn events");
      Rng r = rng.fork(static_cast<std::uint64_t>(k));
      for (const double t : poisson_times(r, rates[k], from, until)) {
        if (k == 2) {
          joins.push_back({t, -1, 1, join_class, where_of(rate_keys[k])});
        } else {
          ChurnAction a;
          a.kind = k == 0 ? ChurnAction::Kind::Crash : ChurnAction::Kind::Leave;
          a.at = t;
          a.where = where_of(rate_keys[k]);
          acts.push_back(a);
        }
      }
    }
    // New ids in time order of their joins (stable for equal times: file order).
    std::stable_sort(joins.begin(), joins.end(), [](const JoinSpec& a, const JoinSpec& b) { return a.at < b.at; });
    for (const JoinSpec& j : joins) {
      for (std::uint32_t c = 0; c < j.count; ++c) {
        ChurnAction a;
        a.kind = ChurnAction::Kind::Join;
        a.at = j.at;
        a.where = j.where;
        a.cls = j.cls;
        if (j.peer >= 0) {
          a.peer = j.peer;
        } else {
          a.peer = next_id++;
          joiner_class_.push_back(j.cls);
        }
        acts.push_back(a);
      }
    }
    s.total_ids = next_id;
    for (const auto& a : acts) {
      if (a.peer >= static_cast<std::int64_t>(s.total_ids))
        fail(a.where, "churn", "p" + std::to_string(a.peer) + " does not exist (ids are p0..p" + std::to_string(s.total_ids - 1) +
                                   "; a join without a name creates the next one)");
    }
    std::stable_sort(acts.begin(), acts.end(), [](const ChurnAction& a, const ChurnAction& b) { return a.at < b.at; });
    s.churn = std::move(acts);
  }

  PeerSet resolve(const std::string& text, const std::string& where, const std::string& key, const Scenario& s) {
    PeerSet out;
    std::vector<bool> in(s.total_ids, false);
    std::size_t start = 0;
    while (start <= text.size()) {
      const auto comma = text.find(',', start);
      const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? text.size() + 1 : comma + 1;
      if (item.empty()) fail(where, key, "empty item in peer set '" + text + "'");
      if (item == "all") {
        std::fill(in.begin(), in.end(), true);
        continue;
      }
      const auto dots = item.find("..");
      if (dots != std::string::npos) {
        const auto a = peer_index(item.substr(0, dots)), b = peer_index(item.substr(dots + 2));
        if (a < 0 || b < a) fail(where, key, "bad range '" + item + "' (expected pA..pB with A <= B)");
        if (b >= static_cast<std::int64_t>(s.total_ids))
          fail(where, key, "'" + item + "' goes past the last peer p" + std::to_string(s.total_ids - 1));
        for (auto i = a; i <= b; ++i) in[static_cast<std::size_t>(i)] = true;
        continue;
      }
      if (const auto p = peer_index(item); p >= 0) {
        if (p >= static_cast<std::int64_t>(s.total_ids))
          fail(where, key, "'" + item + "' does not exist (ids are p0..p" + std::to_string(s.total_ids - 1) + ")");
        in[static_cast<std::size_t>(p)] = true;
        continue;
      }
      const std::uint32_t c = class_index(item, where, key, s);
      std::uint32_t first = 0;
      for (std::uint32_t k = 0; k < c; ++k) first += s.classes[k].count;
      for (std::uint32_t i = first; i < first + s.classes[c].count; ++i) in[i] = true;
      for (std::size_t j = 0; j < joiner_class_.size(); ++j)
        if (joiner_class_[j] == c) in[s.founders + j] = true;
    }
    for (std::uint32_t i = 0; i < s.total_ids; ++i)
      if (in[i]) out.push_back(i);
    return out;
  }

  void resolve_sets(Scenario& s) {
    stragglers(s);
    for (const auto& [si, pi] : pending_stragglers_)
      s.stragglers[si].who = resolve(pending_[pi].text, pending_[pi].where, pending_[pi].key, s);
    for (std::size_t i = 0; i < s.links.size(); ++i) {
      s.links[i].a = resolve(link_sets_[i].a, link_sets_[i].where, "network.link", s);
      s.links[i].b = resolve(link_sets_[i].b, link_sets_[i].where, "network.link", s);
    }
    for (std::size_t i = 0; i < s.partitions.size(); ++i) {
      auto& p = s.partitions[i];
      p.a = resolve(partition_sets_[i].a, partition_sets_[i].where, "network.partition", s);
      if (!partition_sets_[i].b.empty()) {
        p.b = resolve(partition_sets_[i].b, partition_sets_[i].where, "network.partition", s);
      } else {
        std::vector<bool> in(s.total_ids, false);
        for (auto x : p.a) in[x] = true;
        for (std::uint32_t k = 0; k < s.total_ids; ++k)
          if (!in[k]) p.b.push_back(k);
      }
      for (auto x : p.a)
        if (std::binary_search(p.b.begin(), p.b.end(), x))
          fail(p.where, "network.partition", "p" + std::to_string(x) + " is on both sides");
    }
    if (s.topology == Topology::Hypercube && (s.total_ids & (s.total_ids - 1)) != 0)
      fail(where_of("gossip.topology"), "gossip.topology", "a hypercube needs a power-of-two number of peer ids, have " +
                                                               std::to_string(s.total_ids));
  }

  void output(Scenario& s) {
    if (dur("output.sample_every", s.sample_every)) positive("output.sample_every", s.sample_every);
    get("output.eval_peers", s.eval_peers);
    get("output.eval_rows", s.eval_rows);
    get("output.peer_evals", s.peer_evals);
    if (const RawValue* v = r_.last("output.train_evals"))
      s.train_evals = resolve(v->value, v->where, "output.train_evals", s);
    get("output.log_exchanges", s.log_exchanges);
    get("output.log_views", s.log_views);
    if (s.duration > 0 && s.duration / s.sample_every > 1e6)
      fail(where_of("output.sample_every"), "output.sample_every", "more than a million samples: sample less often");
  }
};

}  // namespace

Scenario parse_scenario(const std::string& text, const std::string& name, const std::vector<std::string>& overrides,
                        const std::string& base_dir) {
  Raw raw;
  raw.parse_text(text, name, base_dir, 0);
  for (std::size_t i = 0; i < overrides.size(); ++i) raw.apply_override(overrides[i], static_cast<int>(i));
  return Builder(raw).build(name);
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream f(path);
  if (!f) throw ScenarioError(path + ": cannot read the scenario file");
  std::stringstream ss;
  ss << f.rdbuf();
  const auto slash = path.find_last_of('/');
  return parse_scenario(ss.str(), path, overrides, slash == std::string::npos ? "." : path.substr(0, slash));
}

}  // namespace rumor::sim
