// Partial views' bookkeeping (core/overlay.hpp): two small vectors kept disjoint and bounded.
#include "core/overlay.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "core/view.hpp"

namespace rumor {

namespace {
// View::hash_of: the hashes kept here are handed to View lookups (Gossip passes them on).
std::size_t id_hash(const PeerId& id) { return View::hash_of(id); }
}  // namespace

std::size_t Overlay::slot_of(const PeerId& id, std::size_t h) const {
  if (slots_.empty()) return 0;
  const std::size_t mask = slots_.size() - 1;
  const auto low = static_cast<std::uint32_t>(h);
  for (std::size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.code == 0) return slots_.size();
    if (s.hash == low && id_at(s.code) == id) return i;  // (the id decides: equal low bits are not equal hashes)
  }
}

std::size_t Overlay::slot_of(std::uint32_t c, std::size_t h) const {
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = h & mask;
  while (slots_[i].code != c) {
    RUMOR_CHECK(slots_[i].code != 0);
    i = (i + 1) & mask;
  }
  return i;
}

void Overlay::slot_insert(std::uint32_t c, std::size_t h) {
  if (2 * (slots_used_ + 1) > slots_.size()) {
    // Grow: every entry of both views again (the codes stay, their slots move).
    slots_.assign(std::max<std::size_t>(16, 2 * slots_.size()), Slot{});
    slots_used_ = 0;
    for (std::size_t i = 0; i < active_.size(); ++i)
      if (code(false, i) != c) slot_insert(code(false, i), active_h_[i]);
    for (std::size_t i = 0; i < passive_.size(); ++i)
      if (code(true, i) != c) slot_insert(code(true, i), passive_h_[i]);
  }
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = h & mask;
  while (slots_[i].code != 0) i = (i + 1) & mask;
  slots_[i] = {c, static_cast<std::uint32_t>(h)};
  ++slots_used_;
}

void Overlay::slot_erase(std::size_t i) {
  const std::size_t mask = slots_.size() - 1;
  slots_[i] = {};
  --slots_used_;
  // Backward shift: later entries of the probe run move into the hole when their home allows.
  for (std::size_t j = (i + 1) & mask; slots_[j].code != 0; j = (j + 1) & mask) {
    const std::size_t home = slots_[j].hash & mask;
    // j's entry may move to i if its home is not in the cyclic range (i, j].
    if (((j - home) & mask) >= ((j - i) & mask)) {
      slots_[i] = slots_[j];
      slots_[j] = {};
      i = j;
    }
  }
}

std::size_t Overlay::Ids::find(const PeerId& id, std::size_t h) const {
  const std::size_t s = o.slot_of(id, h);
  if (s == o.slots_.size()) return ids.size();
  const std::uint32_t c = o.slots_[s].code;
  return ((c & kPassiveTag) != 0) == passive ? (c & ~kPassiveTag) - 1 : ids.size();
}
void Overlay::Ids::push(const PeerId& id, std::size_t h) {
  ids.push_back(id);
  hashes.push_back(h);
  o.slot_insert(code(passive, ids.size() - 1), h);
}
void Overlay::Ids::put(std::size_t i, const PeerId& id, std::size_t h) {
  o.slot_erase(o.slot_of(code(passive, i), hashes[i]));
  ids[i] = id;
  hashes[i] = h;
  o.slot_insert(code(passive, i), h);
}
bool Overlay::Ids::erase(const PeerId& id, std::size_t h) {
  const std::size_t s = o.slot_of(id, h);
  if (s == o.slots_.size() || ((o.slots_[s].code & kPassiveTag) != 0) != passive) return false;
  const std::size_t i = (o.slots_[s].code & ~kPassiveTag) - 1;
  o.slot_erase(s);
  // Order does not matter; what it is stays a function of the history.
  const std::size_t last = ids.size() - 1;
  if (i != last) {
    // The last entry moves to i: its slot's code follows it.
    o.slots_[o.slot_of(code(passive, last), hashes[last])].code = code(passive, i);
    ids[i] = std::move(ids[last]);
    hashes[i] = hashes[last];
  }
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
bool Overlay::in_active(const PeerId& id, std::size_t h) const {
  const std::size_t s = slot_of(id, h);
  return s != slots_.size() && (slots_[s].code & kPassiveTag) == 0;
}
bool Overlay::in_passive(const PeerId& id, std::size_t h) const {
  const std::size_t s = slot_of(id, h);
  return s != slots_.size() && (slots_[s].code & kPassiveTag) != 0;
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
  if (passive_cap_ == 0 || in_views(id, h)) return std::nullopt;
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
