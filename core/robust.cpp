// Robust mixing: medians of recent distances, one voice per neighbour; accept / clip / refuse
// (robust.hpp).
#include "core/robust.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"

namespace rumor {

namespace {
// The lower median (for an even count, the smaller of the two middle values: a tie between two
// voices goes to the smaller distance, the cautious side).
double lower_median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}
}  // namespace

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
  RUMOR_CHECK(cfg_.per_peer >= 1 && cfg_.max_peers >= 1);
  RUMOR_CHECK(cfg_.fallback_scale > 0 && cfg_.floor_scale >= 0);
}

double RobustMix::typical(double own_norm) const {
  double t = cfg_.fallback_scale * own_norm;
  if (peers_.size() >= cfg_.min_voices) {
    std::vector<double> voices;
    voices.reserve(peers_.size());
    for (const auto& [id, h] : peers_) voices.push_back(lower_median(h.recent));
    t = lower_median(std::move(voices));
  }
  return std::max({t, cfg_.floor_scale * own_norm, 1e-12});
}

void RobustMix::record(const PeerId& from, double d) {
  auto it = peers_.find(from);
  if (it == peers_.end()) {
    if (peers_.size() >= cfg_.max_peers) {
      auto oldest = std::min_element(peers_.begin(), peers_.end(),
                                     [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
      peers_.erase(oldest);
    }
    it = peers_.emplace(from, History{}).first;
  }
  History& h = it->second;
  if (h.recent.size() < cfg_.per_peer) {
    h.recent.push_back(d);
  } else {
    h.recent[h.next] = d;
    h.next = (h.next + 1) % cfg_.per_peer;
  }
  h.last_used = ++seen_;
}

RobustMix::Verdict RobustMix::judge(const PeerId& from, std::span<const float> theirs, std::span<const float> ours) {
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
  if (!std::isfinite(v.distance)) {
    v.action = Action::Refuse;
    v.scale = 0;
    ++stats_.refused;
    return v;
  }
  // Every verdict is one sample of this neighbour's distance, capped at the radius: a far-off
  // model counts as "at the edge", so a neighbour that really moved away is believed step by
  // step (the radius can grow by clip_factor per few exchanges), and a liar gains no more.
  record(from, std::min(v.distance, v.radius));
  if (cfg_.refuse_factor > 0 && v.distance > cfg_.refuse_factor * v.typical) {
    v.action = Action::Refuse;
    v.scale = 0;
    ++stats_.refused;
  } else if (v.distance > v.radius) {
    v.action = Action::Clip;
    v.scale = v.radius / v.distance;
    ++stats_.clipped;
  } else {
    ++stats_.accepted;
  }
  return v;
}

void RobustMix::clip(std::span<const float> theirs, std::span<const float> ours, const Verdict& v, std::span<float> out) {
  RUMOR_CHECK(theirs.size() == ours.size() && out.size() == ours.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double o = ours[i];
    out[i] = static_cast<float>(o + (static_cast<double>(theirs[i]) - o) * v.scale);
  }
}

std::span<const float> RobustMix::screen(const PeerId& from, std::span<const float> theirs, std::span<const float> ours,
                                         std::vector<float>& scratch, Verdict& v) {
  v = judge(from, theirs, ours);
  if (v.action == Action::Accept) return theirs;
  if (v.action == Action::Refuse) return {};
  scratch.resize(ours.size());
  clip(theirs, ours, v, scratch);
  return scratch;
}

}  // namespace rumor
