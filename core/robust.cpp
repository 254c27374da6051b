// Robust mixing: the median of recent distances, and accept / clip / refuse (robust.hpp).
#include "core/robust.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"

namespace rumor {

const char* robust_action_name(RobustMix::Action a) {
  switch (a) {
    case RobustMix::Action::Accept: return "accept";
    case RobustMix::Action::Clip: return "clip";
    case RobustMix::Action::Refuse: return "refuse";
  }
  return "?";
}

RobustMix::RobustMix(RobustConfig cfg) : cfg_(cfg) {
  RUMOR_CHECK(cfg_.clip_factor > 0 && std::isfinite(cfg_.clip_factor));
  RUMOR_CHECK(cfg_.refuse_factor == 0 || cfg_.refuse_factor >= cfg_.clip_factor);
  RUMOR_CHECK(cfg_.window >= 1);
  RUMOR_CHECK(cfg_.warmup_scale >= 0);
  recent_.reserve(cfg_.window);
}

double RobustMix::typical(double own_norm) const {
  double t = 0;
  if (!recent_.empty()) {
    std::vector<double> v = recent_;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    t = *mid;
    if (v.size() % 2 == 0) t = 0.5 * (t + *std::max_element(v.begin(), mid));
  }
  if (seen_ < cfg_.warmup) t = std::max(t, cfg_.warmup_scale * own_norm);
  // Identical models (distance 0) must not make the radius 0 forever: a tiny floor relative to
  // our own norm, and an absolute one for an all-zero model.
  return std::max({t, 1e-6 * own_norm, 1e-12});
}

void RobustMix::record(double d) {
  if (recent_.size() < cfg_.window) {
    recent_.push_back(d);
  } else {
    recent_[next_] = d;
    next_ = (next_ + 1) % cfg_.window;
  }
  ++seen_;
}

RobustMix::Verdict RobustMix::judge(std::span<const float> theirs, std::span<const float> ours) {
  RUMOR_CHECK(theirs.size() == ours.size());
  Verdict v;
  if (!cfg_.enabled) return v;
  double d2 = 0, n2 = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double diff = static_cast<double>(theirs[i]) - static_cast<double>(ours[i]);
    d2 += diff * diff;
    n2 += static_cast<double>(ours[i]) * ours[i];
  }
  v.distance = std::sqrt(d2);
  v.typical = typical(std::sqrt(n2));
  v.radius = cfg_.clip_factor * v.typical;
  if (!std::isfinite(v.distance) || (cfg_.refuse_factor > 0 && v.distance > cfg_.refuse_factor * v.typical)) {
    v.action = Action::Refuse;
    v.scale = 0;
    ++stats_.refused;
    return v;
  }
  if (v.distance > v.radius) {
    v.action = Action::Clip;
    v.scale = v.radius / v.distance;
    ++stats_.clipped;
    record(v.radius);
    return v;
  }
  ++stats_.accepted;
  record(v.distance);
  return v;
}

void RobustMix::clip(std::span<const float> theirs, std::span<const float> ours, const Verdict& v, std::span<float> out) {
  RUMOR_CHECK(theirs.size() == ours.size() && out.size() == ours.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double o = ours[i];
    out[i] = static_cast<float>(o + (static_cast<double>(theirs[i]) - o) * v.scale);
  }
}

std::span<const float> RobustMix::screen(std::span<const float> theirs, std::span<const float> ours,
                                         std::vector<float>& scratch, Verdict& v) {
  v = judge(theirs, ours);
  if (v.action == Action::Accept) return theirs;
  if (v.action == Action::Refuse) return {};
  scratch.resize(ours.size());
  clip(theirs, ours, v, scratch);
  return scratch;
}

}  // namespace rumor
