// Fault points: names and the reading of [faults] / [invariants] (faults.hpp). Where each fault
// acts is in the engine's files (delivery.cpp, peer_life.cpp, simulator.cpp).
#include "sim/faults.hpp"

#include "sim/ini.hpp"
#include "sim/scenario.hpp"

namespace rumor::sim {

const char* fault_name(FaultPoint f) {
  switch (f) {
    case FaultPoint::Drop: return "drop";
    case FaultPoint::Delay: return "delay";
    case FaultPoint::Duplicate: return "duplicate";
    case FaultPoint::Reorder: return "reorder";
    case FaultPoint::Truncate: return "truncate";
    case FaultPoint::Corrupt: return "corrupt";
    case FaultPoint::ConnectFail: return "connect_fail";
    case FaultPoint::Stall: return "stall";
    case FaultPoint::CrashMidExchange: return "crash_mid_exchange";
    case FaultPoint::CrashMidTransfer: return "crash_mid_transfer";
    case FaultPoint::CrashMidLeave: return "crash_mid_leave";
    case FaultPoint::Restart: return "restart";
    case FaultPoint::Partition: return "partition";
    case FaultPoint::Slow: return "slow";
    case FaultPoint::ClockSkew: return "clock_skew";
    case FaultPoint::Count: break;
  }
  return "?";
}

const char* mutation_name(Mutation m) {
  switch (m) {
    case Mutation::None: return "none";
    case Mutation::SkipOverlap: return "skip_overlap";
    case Mutation::MixNonfinite: return "mix_nonfinite";
    case Mutation::KeepDead: return "keep_dead";
    case Mutation::EndlessWait: return "endless_wait";
  }
  return "?";
}

bool FaultSettings::changes_sum() const {
  // An exchange whose responder mixed and whose initiator then gives up (its accept or reply
  // lost, cut, refused, or late past the deadline because a peer stalled) loses the half that
  // was applied: the protocol accepts that on a lossy network (docs/testing.md). A crash takes
  // a model away, a restart brings an old one back. Delay and reorder break the links' order
  // (TCP's): an initiator that gives an exchange up early, on news that its partner left or
  // on a refused connect, can then do so while the accept is still behind (docs/testing.md,
  // "Known limits"). Duplicate, slow and clock_skew keep the sum: the invariant holds under them.
  for (FaultPoint f : {FaultPoint::Drop, FaultPoint::Delay, FaultPoint::Reorder, FaultPoint::Truncate, FaultPoint::Corrupt, FaultPoint::ConnectFail,
                       FaultPoint::Stall, FaultPoint::CrashMidExchange, FaultPoint::CrashMidTransfer,
                       FaultPoint::CrashMidLeave, FaultPoint::Restart, FaultPoint::Partition})
    if ((*this)[f] > 0) return true;
  return false;
}

std::set<std::string> fault_keys() {
  std::set<std::string> k = {"delay_max", "reorder_delay", "stall_max", "restart_after", "partition_max",
                             "slow_factor", "skew", "mutation"};
  for (std::size_t i = 0; i < kFaultPoints; ++i) k.insert(fault_name(static_cast<FaultPoint>(i)));
  return k;
}

void read_faults(const ini::Raw& r, Scenario& s) {
  FaultSettings& f = s.faults;
  for (std::size_t i = 0; i < kFaultPoints; ++i) {
    const auto fp = static_cast<FaultPoint>(i);
    const std::string key = std::string("faults.") + fault_name(fp);
    const ini::RawValue* v = r.last(key);
    if (!v) continue;
    double x = 0;
    ini::convert(v->value, v->where, key, x);
    if (!(x >= 0)) ini::fail(v->where, key, "must be >= 0");
    if (fp != FaultPoint::Partition && x > 1) ini::fail(v->where, key, "a probability: must be in [0, 1]");
    f[fp] = x;
  }
  const auto dur = [&](const char* name, double& out, bool allow_zero) {
    const std::string key = std::string("faults.") + name;
    const ini::RawValue* v = r.last(key);
    if (!v) return;
    out = parse_duration(v->value, v->where, key);
    if (out < 0 || (!allow_zero && out == 0)) ini::fail(v->where, key, allow_zero ? "must be >= 0" : "must be > 0");
  };
  dur("delay_max", f.delay_max, true);
  dur("reorder_delay", f.reorder_delay, false);
  dur("stall_max", f.stall_max, true);
  dur("restart_after", f.restart_after, true);
  dur("partition_max", f.partition_max, false);
  if (const ini::RawValue* v = r.last("faults.slow_factor")) {
    ini::convert(v->value, v->where, "faults.slow_factor", f.slow_factor);
    if (!(f.slow_factor >= 1)) ini::fail(v->where, "faults.slow_factor", "must be >= 1");
  }
  if (const ini::RawValue* v = r.last("faults.skew")) {
    ini::convert(v->value, v->where, "faults.skew", f.skew);
    if (!(f.skew >= 0 && f.skew < 1)) ini::fail(v->where, "faults.skew", "must be in [0, 1)");
  }
  if (const ini::RawValue* v = r.last("faults.mutation")) {
    bool found = false;
    for (auto m : {Mutation::None, Mutation::SkipOverlap, Mutation::MixNonfinite, Mutation::KeepDead, Mutation::EndlessWait})
      if (v->value == mutation_name(m)) {
        f.mutation = m;
        found = true;
      }
    if (!found)
      ini::fail(v->where, "faults.mutation",
                "'" + v->value + "' is not one of none, skip_overlap, mix_nonfinite, keep_dead, endless_wait (test-only)");
  }
  if (const ini::RawValue* v = r.last("invariants.check")) ini::convert(v->value, v->where, "invariants.check", s.check_invariants);
  if ((f.any() || f.mutation != Mutation::None) && s.algorithm != Algorithm::Gossip) {
    const ini::RawValue* v = r.last("algorithm.kind");
    ini::fail(v ? v->where : "scenario", "faults", "faults are only simulated for gossip");
  }
}

}  // namespace rumor::sim
