// Fault injection of the simulator (docs/testing.md), in the style of FoundationDB's BUGGIFY:
// named fault points, each a probability (or a rate) read from the scenario's `[faults]`
// section, all off by default. Every draw comes from one stream of its own
// (streams::kFaults), in event order, so a seed gives the same faults, the same run and
// byte-identical outputs; turning faults on does not shift the draws of any other model.
// Each point counts how often it fired (summary.json "faults", the campaign summary).
//
// Sim-only: the daemon has none of this. Where a fault acts:
//   message points (drop, delay, duplicate, reorder, truncate, corrupt, connect_fail): in the
//     simulated network hand-over (delivery.cpp), one draw per point per message;
//   stall: at a step's start (peer_life.cpp); slow, clock_skew: once per life of a peer;
//   crash_mid_*: when a peer sends a message of that protocol step (it crashes right after);
//   restart: a peer crashed by a fault comes back, as a new incarnation, from its model;
//   partition: a Poisson rate per second of the live peers split in two, healed later.
// Mutations (test-only, `faults.mutation`) break the protocol on purpose so that tests can
// check that a campaign finds it (tests/sim/test_campaign.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <set>
#include <string>

namespace rumor::sim {

enum class FaultPoint : std::uint8_t {
  Drop, Delay, Duplicate, Reorder, Truncate, Corrupt, ConnectFail, Stall, CrashMidExchange, CrashMidTransfer,
  CrashMidLeave, Restart, Partition, Slow, ClockSkew, Count
};
inline constexpr std::size_t kFaultPoints = static_cast<std::size_t>(FaultPoint::Count);
// The point's name: its key in [faults], in summary.json and the campaign summary.
const char* fault_name(FaultPoint f);

// Test-only breakages of the protocol (docs/testing.md, "Mutations").
enum class Mutation : std::uint8_t {
  None,
  SkipOverlap,   // the peers ignore the staleness bound (the checker still holds them to TAU)
  MixNonfinite,  // a NaN is mixed into a model after an exchange
  KeepDead,      // a member declared dead is never removed from a view
  EndlessWait,   // a staleness wait that never ends
};
const char* mutation_name(Mutation m);

struct FaultSettings {
  // Per point: the probability per occasion (per message, per step, per life), or for
  // `partition` a rate per second of virtual time.
  std::array<double, kFaultPoints> p{};
  double delay_max = 0.2;       // delay: an extra delay uniform in [0, delay_max] s
  double reorder_delay = 0.05;  // reorder: the held message waits this much longer
  double stall_max = 2.0;       // stall: the peer is paused uniform in [0, stall_max] s
  double restart_after = 1.0;   // restart: back after uniform [0.5, 1.5] x this
  double partition_max = 3.0;   // partition: heals after uniform [0.2, 1] x this
  double slow_factor = 4.0;     // slow: step times x this
  double skew = 0.3;            // clock_skew: the peer's clock runs at a rate in [1-skew, 1+skew]
  Mutation mutation = Mutation::None;
  double operator[](FaultPoint f) const { return p[static_cast<std::size_t>(f)]; }
  double& operator[](FaultPoint f) { return p[static_cast<std::size_t>(f)]; }
  bool any() const {
    for (double x : p)
      if (x > 0) return true;
    return false;
  }
  // Faults that legitimately change the sum of the parameters (the invariant then is off).
  bool changes_sum() const;
};

using FaultCounts = std::array<std::uint64_t, kFaultPoints>;

struct Scenario;
namespace ini {
class Raw;
}
// The keys of [faults] (the scenario's table of known keys).
std::set<std::string> fault_keys();
// Reads [faults] and [invariants] into `s` (scenario.cpp's typed pass calls it last); errors
// name section.key as every other section's do.
void read_faults(const ini::Raw& r, Scenario& s);

}  // namespace rumor::sim
