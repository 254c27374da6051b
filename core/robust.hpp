// Robust mixing (`--robust`): what a peer does with a neighbour's model that is far from its own,
// in the spirit of CenteredClip (Karimireddy, He and Jaggi, "Learning from History for
// Byzantine Robust Optimization", ICML 2021): the difference m - x is clipped to a radius, so no
// single neighbour can pull us further than that in one exchange, however large its values.
//
// The radius follows what the swarm has been showing us, one voice per neighbour. For each
// neighbour we keep the last `per_peer` distances d = ||m - x|| we judged (each capped at the
// radius of its time) and take their median; the typical distance t is the median of those
// per-neighbour values. A neighbour that floods us with exchanges still has one voice, so as
// long as fewer than half of the neighbours we hear from misbehave, t is an honest distance.
// Then, for a model at distance d:
//   d <= clip_factor * t                  accept: mix m as it is
//   d <= refuse_factor * t                clip: mix x + (m - x) * (clip_factor * t / d)
//   beyond (or d not finite)              refuse: mix nothing (refuse_factor 0: never refuse)
// t never drops below floor_scale * ||x|| (identical models, distance 0, would otherwise make
// every later difference look infinitely far). While fewer than `min_voices` neighbours have
// been heard, a median cannot outvote a liar (at the start of a run, the first voice may be the
// bad one), so t is then simply fallback_scale * ||x||: a fellow trainee's model differs from
// ours by a fraction of its norm. Non-finite parameters never get here: the protocol refuses
// them always, robust or not.
//
// What it cannot do: a neighbour that stays within a few typical distances of us looks like an
// honest one with different data; its pull is bounded by the radius per exchange, not removed.
// Conservation of the weighted sum (docs/ARCHITECTURE.md) holds for an exchange that both sides
// accept; a clipped or refused one breaks it by design, since that model is not believed.
//
// Pure and deterministic: the same sequence of judge() calls gives the same verdicts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "core/message.hpp"

namespace rumor {

struct RobustConfig {
  bool enabled = false;
  double clip_factor = 8.0;       // clip beyond this many typical distances
  double refuse_factor = 64.0;    // refuse beyond this many (0: never refuse, always clip)
  std::size_t per_peer = 5;       // distances remembered per neighbour
  std::size_t max_peers = 64;     // neighbours remembered (the least recently judged is forgotten)
  std::size_t min_voices = 3;     // neighbours heard before their median is used
  double fallback_scale = 0.1;    // t = fallback_scale * ||x|| until then
  double floor_scale = 1e-3;      // t >= floor_scale * ||x|| always
};

struct RobustStats {
  std::uint64_t accepted = 0, clipped = 0, refused = 0;
};

class RobustMix {
 public:
  enum class Action { Accept, Clip, Refuse };
  struct Verdict {
    Action action = Action::Accept;
    double distance = 0;  // ||theirs - ours||
    double typical = 0;   // t at the time of the verdict
    double radius = 0;    // clip_factor * t: the distance after clipping
    double scale = 1;     // what (theirs - ours) is multiplied by (1 when accepted, 0 when refused)
  };

  explicit RobustMix(RobustConfig cfg = {});

  // Judges a model `theirs` received from `from` against our snapshot `ours` (same size) and
  // records the outcome. Disabled: always Accept, nothing recorded.
  Verdict judge(const PeerId& from, std::span<const float> theirs, std::span<const float> ours);
  // out = ours + (theirs - ours) * v.scale, computed in double so that huge values cannot
  // overflow on the way. `out` may alias `theirs`.
  static void clip(std::span<const float> theirs, std::span<const float> ours, const Verdict& v, std::span<float> out);
  // judge() and, when clipped, clip() into `scratch`: the model to mix (theirs, or scratch), or
  // an empty span when refused.
  std::span<const float> screen(const PeerId& from, std::span<const float> theirs, std::span<const float> ours,
                                std::vector<float>& scratch, Verdict& v);

  // The typical distance t for a model whose own norm is `own_norm`.
  double typical(double own_norm) const;
  const RobustStats& stats() const { return stats_; }
  const RobustConfig& config() const { return cfg_; }
  bool enabled() const { return cfg_.enabled; }

 private:
  struct History {
    std::vector<double> recent;  // ring of the last per_peer distances
    std::size_t next = 0;
    std::uint64_t last_used = 0;
  };
  void record(const PeerId& from, double d);
  RobustConfig cfg_;
  std::map<PeerId, History> peers_;
  std::uint64_t seen_ = 0;  // distances recorded, all neighbours (orders last_used)
  RobustStats stats_;
};

const char* robust_action_name(RobustMix::Action a);

}  // namespace rumor
