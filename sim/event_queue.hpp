// The simulator's event queue: a binary heap of small plain events ordered by (time, seq).
//
// Tie rule (docs/sim.md, core/timed_queue.hpp): events with equal virtual time run in the order
// they were scheduled, so a run is a pure function of the scenario and seed.
// Events carry no pointers: bulky data (messages) lives in the simulator's slab and an event
// holds its index, so pushing and popping never allocates once the heap has grown.
#pragma once
#include <cstdint>
#include <vector>

#include "core/timed_queue.hpp"

namespace rumor::sim {

enum class EventKind : std::uint8_t {
  Start,       // a peer has loaded its data: it starts the protocol and training
  StepMid,     // the forward/backward half of a step is done (the mid-step boundary)
  StepEnd,     // the optimizer half is done (the end-of-step boundary)
  Resume,      // an evaluation pause is over
  Respond,     // compute.driver = python: 20 ms into an evaluation, a thread answers for the peer
  Tick,        // training off: one averaging tick
  WaitTick,    // an idle wait's periodic wake-up (arg: its iteration)
  Deliver,     // a message arrives (peer: receiver; arg: slab index)
  Timer,       // a protocol timer fires (arg: the timer id)
  SendFailed,  // a send of `peer` failed (arg: the target's index)
  Churn,       // a churn action of the scenario (arg: its index)
  Fault,       // a fault point's action (sim/faults.hpp; arg: FaultAction | point << 8)
};

struct Event {
  double t = 0;
  std::uint64_t seq = 0;
  std::uint64_t arg = 0;
  std::uint32_t peer = 0;
  std::uint32_t life = 0;  // the peer's life when scheduled: events of an earlier life are void
  EventKind kind = EventKind::Start;
};

// The simulator's queue (core/timed_queue.hpp): events carry no pointers, so pushing and
// popping never allocates once the heap has grown.
using EventQueue = TimedQueue<Event>;

}  // namespace rumor::sim
