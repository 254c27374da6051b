// Partial views' bookkeeping (core/overlay.hpp): two small vectors kept disjoint and bounded.
#include "core/overlay.hpp"

#include <algorithm>
#include <cmath>

#include "core/view.hpp"

namespace rumor {

namespace {
// View::hash_of: the hashes kept here are handed to View lookups (Gossip passes them on).
std::size_t id_hash(const PeerId& id) { return View::hash_of(id); }
std::size_t find_in(const std::vector<PeerId>& ids, const std::vector<std::size_t>& hashes, const PeerId& id,
                    std::size_t h) {
  for (std::size_t i = 0; i < hashes.size(); ++i)
    if (hashes[i] == h && ids[i] == id) return i;
  return ids.size();
}
}  // namespace

std::size_t Overlay::Ids::find(const PeerId& id, std::size_t h) const { return find_in(ids, hashes, id, h); }
void Overlay::Ids::push(const PeerId& id, std::size_t h) {
  ids.push_back(id);
  hashes.push_back(h);
}
void Overlay::Ids::put(std::size_t i, const PeerId& id, std::size_t h) {
  ids[i] = id;
  hashes[i] = h;
}
bool Overlay::Ids::erase(const PeerId& id, std::size_t h) {
  const std::size_t i = find(id, h);
  if (i == ids.size()) return false;
  // Order does not matter; what it is stays a function of the history.
  ids[i] = std::move(ids.back());
  hashes[i] = hashes.back();
  ids.pop_back();
  hashes.pop_back();
  return true;
}

std::size_t default_active_view(std::size_t n) {
  const double k = std::floor(std::log2(static_cast<double>(std::max<std::size_t>(n, 2)))) + 1;
  return std::max<std::size_t>(4, static_cast<std::size_t>(k));
}

bool Overlay::in_active(const PeerId& id) const { return in_active(id, id_hash(id)); }
bool Overlay::in_passive(const PeerId& id) const { return in_passive(id, id_hash(id)); }
bool Overlay::in_active(const PeerId& id, std::size_t h) const { return find_in(active_, active_h_, id, h) != active_.size(); }
bool Overlay::in_passive(const PeerId& id, std::size_t h) const {
  return find_in(passive_, passive_h_, id, h) != passive_.size();
}

std::optional<PeerId> Overlay::add_active(PeerId id, Rng& rng) {
  const std::size_t h = id_hash(id);
  if (active_ids().find(id, h) != active_.size()) return std::nullopt;
  passive_ids().erase(id, h);
  pending.erase(id);
  std::optional<PeerId> dropped;
  if (active_cap_ > 0 && active_.size() >= active_cap_) {
    const std::size_t j = rng.below(active_.size());
    dropped = active_[j];
    active_ids().put(j, id, h);
    add_passive(*dropped, rng);
  } else {
    active_ids().push(id, h);
  }
  return dropped;
}

std::optional<PeerId> Overlay::add_passive(const PeerId& id, Rng& rng) {
  return add_passive(id, id_hash(id), rng, nullptr);
}

std::optional<PeerId> Overlay::add_passive(const PeerId& id, std::size_t h, Rng& rng, std::size_t* dropped_hash) {
  if (active_ids().find(id, h) != active_.size() || passive_ids().find(id, h) != passive_.size() ||
      passive_cap_ == 0)
    return std::nullopt;
  if (passive_.size() < passive_cap_) {
    passive_ids().push(id, h);
    return std::nullopt;
  }
  const std::size_t j = rng.below(passive_.size());
  PeerId dropped = passive_[j];
  if (dropped_hash) *dropped_hash = passive_h_[j];
  passive_ids().put(j, id, h);
  pending.erase(dropped);
  return dropped;
}

bool Overlay::demote(PeerId id, Rng& rng) {
  if (!active_ids().erase(id, id_hash(id))) return false;
  if (auto dropped = add_passive(id, rng)) (void)dropped;  // the caller trims View later
  return true;
}

bool Overlay::remove(PeerId id) {
  pending.erase(id);
  const std::size_t h = id_hash(id);
  const bool a = active_ids().erase(id, h);
  const bool p = passive_ids().erase(id, h);
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
