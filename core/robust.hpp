// Robust mixing (`--robust`): what a peer does with a neighbour's model that is far from its own,
// in the spirit of CenteredClip (Karimireddy, He and Jaggi, "Learning from History for
// Byzantine Robust Optimization", ICML 2021): the difference m - x is clipped to a radius, so no
// single neighbour can pull us further than that in one exchange, however large its values.
//
// The radius follows what the swarm has been showing us. We keep the distances d = ||m - x||
// of the last `window` models we mixed (after clipping) and call their median t the typical
// distance; a median, so that a minority of bad neighbours cannot move it. Then:
//   d <= clip_factor * t                  accept: mix m as it is
//   d <= refuse_factor * t                clip: mix x + (m - x) * (clip_factor * t / d)
//   beyond (or d not finite)              refuse: mix nothing (refuse_factor 0: never refuse)
// Until `warmup` distances are in, t is at least warmup_scale * ||x|| (the start of a run has
// no history; a fellow trainee's model differs from ours by a fraction of its norm). Non-finite
// parameters never get here: the protocol refuses them always, robust or not.
//
// Cost when nobody misbehaves: an honest model beyond clip_factor times the median is slowed
// (clipped), never refused, so averaging still converges; docs/security.md has measurements.
// Conservation of the weighted sum (docs/ARCHITECTURE.md) holds for an exchange that both sides
// accept; a clipped or refused one breaks it by design, since its model is not believed.
//
// Pure and deterministic: the same sequence of judge() calls gives the same verdicts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rumor {

struct RobustConfig {
  bool enabled = false;
  double clip_factor = 4.0;     // clip beyond this many typical distances
  double refuse_factor = 100.0; // refuse beyond this many (0: never refuse, always clip)
  std::size_t window = 32;      // distances remembered for the median
  std::size_t warmup = 8;       // until this many are in, t >= warmup_scale * ||x||
  double warmup_scale = 0.1;
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

  // Judges a received model `theirs` against our snapshot `ours` (same size) and records the
  // outcome. Disabled: always Accept, nothing recorded.
  Verdict judge(std::span<const float> theirs, std::span<const float> ours);
  // out = ours + (theirs - ours) * v.scale, computed in double so that huge values cannot
  // overflow on the way. `out` may alias `theirs`.
  static void clip(std::span<const float> theirs, std::span<const float> ours, const Verdict& v, std::span<float> out);
  // judge() and, when clipped, clip() into `scratch`: the model to mix (theirs, or scratch), or
  // an empty span when refused.
  std::span<const float> screen(std::span<const float> theirs, std::span<const float> ours, std::vector<float>& scratch,
                                Verdict& v);

  // The typical distance t for a model whose own norm is `own_norm`.
  double typical(double own_norm) const;
  const RobustStats& stats() const { return stats_; }
  const RobustConfig& config() const { return cfg_; }
  bool enabled() const { return cfg_.enabled; }

 private:
  void record(double d);
  RobustConfig cfg_;
  std::vector<double> recent_;  // ring of the last `window` distances
  std::size_t next_ = 0;
  std::uint64_t seen_ = 0;
  RobustStats stats_;
};

const char* robust_action_name(RobustMix::Action a);

}  // namespace rumor
