// LoopModel: what the loop around the protocol (core/peer_loop.hpp) needs of the model a peer
// trains, kept apart so that a model's header does not pull in the protocol.
#pragma once
#include <cstdint>
#include <span>

namespace rumor {

// What the loop needs of the model being trained. core's Trainer is one implementation
// (core/trainer.hpp), a PyTorch model behind the Python module another, the
// simulator's averaging-only peers a third.
class LoopModel {
 public:
  virtual ~LoopModel() = default;
  virtual std::span<float> params() = 0;        // the flat live parameters Gossip mixes into
  virtual std::uint64_t steps() const = 0;      // local steps done: the peer's clock
  virtual std::uint64_t samples() const = 0;    // samples processed (mix weight "samples")
  virtual double epochs_done() const = 0;       // 0 where there is no notion of epochs
  virtual void adopt_step(std::uint64_t step) = 0;  // a state transfer brought the swarm's step
};

}  // namespace rumor
