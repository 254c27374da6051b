// Outer momentum for gossip (gossip-DiLoCo; GossipConfig::outer, `--outer-lr`, `--outer-momentum`).
//
// DiLoCo trains H local steps from a shared model theta, averages the workers' models m, and
// treats delta = theta - m as a pseudo-gradient for an outer optimizer (SGD with Nesterov
// momentum): v <- mu v + delta; theta <- theta - eta (delta + mu v). With an exact average every
// worker applies the same step. Gossip has no round and no shared theta, so each peer keeps its
// own anchor a (its model right after its last mix), and every exchange that mixes into its model
// (as initiator or responder, whenever it lands, under the overlap rule and the staleness bound
// as usual) first takes one outer step on its *local progress* since then, and then mixes:
//     delta = a - x;  v <- mu v + delta;  x <- a - eta (nesterov ? delta + mu v : v);
//     x <- x + w (y_s - x_s)   (the mix, unchanged);   a <- x.
// Mixing is linear, so the swarm's mean model moves as DiLoCo's theta does (the mean of the
// peers' outer steps), while the neighbours' pull itself is never amplified: applying momentum
// to the whole change a - m, pull included, overshoots the neighbour (with eta 0.7 and mu 0.9
// the pull grows up to 7-fold) and the swarm diverges (tests/core/test_outer.cpp showed it).
// eta = 1, mu = 0 gives back plain gossip, and is what `enabled()` is false for. With training
// off there is no local progress: every outer step is the identity and mixing conserves the sum.
//
// Where it starts and stops (core/peer_loop.cpp, core/gossip.cpp): the anchor is taken when
// training begins (after the state wait: a joiner's anchor is the model it adopted; a resumed
// peer's, the checkpoint it loaded), and the outer steps end when this peer's training ends
// (Gossip::set_done): settling is plain averaging, so the models still agree in the end and no
// momentum left over pushes them apart. The anchor and the velocity are not checkpointed: a
// restart begins them again (momentum 0), as a DiLoCo worker that rejoins does. With the topk codec
// the responder takes its outer step before it encodes y_s[S], so its reply and its mix see one
// model.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace rumor {

struct OuterConfig {
  double lr = 1.0;        // eta
  double momentum = 0.0;  // mu, in [0, 1)
  bool nesterov = true;
  bool enabled() const { return lr != 1.0 || momentum != 0.0; }
};

class OuterOptimizer {
 public:
  explicit OuterOptimizer(OuterConfig c) : c_(c) {}
  const OuterConfig& config() const { return c_; }
  // Training begins from `x`: the anchor is x, the velocity 0. A no-op when not enabled().
  void begin(std::span<const float> x);
  // Training is over: no more outer steps (memory freed).
  void end();
  bool active() const { return !anchor_.empty(); }
  // A mix is about to land on `x`: one outer step on the local progress a - x replaces it.
  // A no-op unless active(), or if x's size is not the anchor's.
  void step(std::span<float> x) { step(x, 0, x.size()); }
  // The same on x[lo, lo + len) only (fragments: the range an exchange mixes); anchor and
  // velocity elsewhere are left as they are.
  void step(std::span<float> x, std::size_t lo, std::size_t len);
  // The mix has landed: the anchor is `x` now (on x[lo, lo + len) only).
  void rebase(std::span<const float> x) { rebase(x, 0, x.size()); }
  void rebase(std::span<const float> x, std::size_t lo, std::size_t len);
  std::uint64_t steps() const { return steps_; }
  std::span<const float> anchor() const { return anchor_; }
  std::span<const float> velocity() const { return velocity_; }

 private:
  OuterConfig c_;
  std::vector<float> anchor_, velocity_;
  std::uint64_t steps_ = 0;
};

}  // namespace rumor
