// Partial views' bookkeeping (core/overlay.hpp): two small vectors kept disjoint and bounded.
#include "core/overlay.hpp"

#include <algorithm>
#include <cmath>

namespace rumor {

namespace {
bool erase_from(std::vector<PeerId>& v, const PeerId& id) {
  const auto it = std::find(v.begin(), v.end(), id);
  if (it == v.end()) return false;
  *it = v.back();  // order does not matter; what it is stays a function of the history
  v.pop_back();
  return true;
}
}  // namespace

std::size_t default_active_view(std::size_t n) {
  const double k = std::floor(std::log2(static_cast<double>(std::max<std::size_t>(n, 2)))) + 1;
  return std::max<std::size_t>(4, static_cast<std::size_t>(k));
}

bool Overlay::in_active(const PeerId& id) const { return std::find(active_.begin(), active_.end(), id) != active_.end(); }
bool Overlay::in_passive(const PeerId& id) const {
  return std::find(passive_.begin(), passive_.end(), id) != passive_.end();
}

std::optional<PeerId> Overlay::add_active(const PeerId& id, Rng& rng) {
  if (in_active(id)) return std::nullopt;
  erase_from(passive_, id);
  pending.erase(id);
  std::optional<PeerId> dropped;
  if (active_cap_ > 0 && active_.size() >= active_cap_) {
    const std::size_t j = rng.below(active_.size());
    dropped = active_[j];
    active_[j] = id;
    add_passive(*dropped, rng);
  } else {
    active_.push_back(id);
  }
  return dropped;
}

std::optional<PeerId> Overlay::add_passive(const PeerId& id, Rng& rng) {
  if (in_active(id) || in_passive(id) || passive_cap_ == 0) return std::nullopt;
  if (passive_.size() < passive_cap_) {
    passive_.push_back(id);
    return std::nullopt;
  }
  const std::size_t j = rng.below(passive_.size());
  PeerId dropped = passive_[j];
  passive_[j] = id;
  pending.erase(dropped);
  return dropped;
}

bool Overlay::demote(const PeerId& id, Rng& rng) {
  if (!erase_from(active_, id)) return false;
  if (auto dropped = add_passive(id, rng)) (void)dropped;  // the caller trims View later
  return true;
}

bool Overlay::remove(const PeerId& id) {
  pending.erase(id);
  const bool a = erase_from(active_, id);
  const bool p = erase_from(passive_, id);
  return a || p;
}

PeerId Overlay::random_active(Rng& rng, const PeerId& not1, const PeerId& not2) const {
  std::vector<const PeerId*> c;
  for (const auto& id : active_)
    if (id != not1 && id != not2) c.push_back(&id);
  return c.empty() ? PeerId{} : *c[rng.below(c.size())];
}

PeerId Overlay::random_passive(Rng& rng, const PeerId& not1) const {
  std::vector<const PeerId*> c;
  for (const auto& id : passive_)
    if (id != not1) c.push_back(&id);
  return c.empty() ? PeerId{} : *c[rng.below(c.size())];
}

std::vector<PeerId> Overlay::sample(const std::vector<PeerId>& v, std::size_t k, Rng& rng) {
  std::vector<PeerId> c = v;
  const std::size_t m = std::min(k, c.size());
  for (std::size_t i = 0; i < m; ++i) std::swap(c[i], c[i + rng.below(c.size() - i)]);
  c.resize(m);
  return c;
}

std::vector<PeerId> Overlay::sample_active(std::size_t k, Rng& rng) const { return sample(active_, k, rng); }
std::vector<PeerId> Overlay::sample_passive(std::size_t k, Rng& rng) const { return sample(passive_, k, rng); }

}  // namespace rumor
