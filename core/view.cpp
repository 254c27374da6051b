// The membership view (view.hpp): merging digests (higher incarnation wins, then the more
// severe state), state changes with the alive list and live count kept in step, and the digest
// that rides on every message: ourselves plus a uniform random subset, `limit` entries at most.
#include "core/view.hpp"

#include <algorithm>

#include "core/check.hpp"
#include "core/rng.hpp"

namespace rumor {

const char* member_state_name(MemberState s) {
  switch (s) {
    case MemberState::Alive: return "alive";
    case MemberState::Suspect: return "suspect";
    case MemberState::Dead: return "dead";
    case MemberState::Left: return "left";
  }
  return "?";
}

namespace {
std::size_t id_hash(std::string_view id) { return View::hash_of(id); }
// An id's first 8 bytes, big-endian, zero-padded (View::Ordered).
std::uint64_t id_key(std::string_view id) {
  std::uint64_t k = 0;
  for (std::size_t i = 0; i < 8; ++i)
    k = (k << 8) | (i < id.size() ? static_cast<unsigned char>(id[i]) : 0u);
  return k;
}
int severity(MemberState s) {
  switch (s) {
    case MemberState::Alive: return 0;
    case MemberState::Suspect: return 1;
    case MemberState::Dead: return 2;
    case MemberState::Left: return 2;
  }
  return 0;
}
}  // namespace

std::optional<View::Change> View::merge(const MemberDigest& d, double now) {
  const std::size_t h = id_hash(d.id);
  return merge(d, now, index_find(d.id, h), nullptr, h);
}

std::optional<View::Change> View::merge(const MemberDigest& d, double now, Member* found, Member** added_out,
                                        std::size_t hash) {
  if (d.incarnation > kMaxIncarnation) return std::nullopt;
  if (!found) {
    Member& added = *allocate();
    if (added_out) *added_out = &added;
    added.d = d;
    added.hash = hash;
    added.last_heard = now;
    added.clock_seen = now;
    if (d.state == MemberState::Suspect) added.suspect_since = now;
    const std::uint64_t key = id_key(d.id);
    sorted_.insert(sorted_place(d.id, key), Ordered{key, &added});
    index_insert(&added, hash);
    all_.push_back(&added);
    if (added.d.state == MemberState::Alive) {
      added.alive_pos = alive_.size();
      alive_.push_back(&added);
    } else {
      add_news(&added);
    }
    live_count_ += added.live();
    live_trainers_ += added.live_trainer();
    dead_count_ += added.d.state == MemberState::Dead;
    others_samples_ += d.samples;
    return Change{d.id, std::nullopt, d.state};
  }
  Member& m = *found;
  if (d.clock > m.d.clock) {
    if (m.clock_seen >= 0 && now > m.clock_seen) {
      const double per_step = (now - m.clock_seen) / static_cast<double>(d.clock - m.d.clock);
      m.step_seconds = m.step_seconds > 0 ? 0.75 * m.step_seconds + 0.25 * per_step : per_step;
    }
    m.clock_seen = now;
    m.d.clock = d.clock;
  }
  if (d.samples > m.d.samples) {
    others_samples_ += d.samples - m.d.samples;
    m.d.samples = d.samples;
  }
  const bool trained = m.live_trainer();
  if (d.incarnation > m.d.incarnation) m.d.done = d.done;  // a new life: it may train again
  else if (d.incarnation == m.d.incarnation) m.d.done = m.d.done || d.done;
  live_trainers_ = live_trainers_ - trained + m.live_trainer();  // (state_changed counts a new state)
  const MemberState before = m.d.state;
  bool take = d.incarnation > m.d.incarnation ||
              (d.incarnation == m.d.incarnation && severity(d.state) > severity(m.d.state));
  if (!take) return std::nullopt;
  m.d.incarnation = d.incarnation;
  m.d.state = d.state;
  state_changed(m, before);
  if (d.state == MemberState::Suspect && before != MemberState::Suspect) m.suspect_since = now;
  if (d.state == MemberState::Alive && before != MemberState::Alive) {
    m.failures = 0;
    m.skip_until = 0;
    m.last_heard = now;
  }
  if (before == d.state) return std::nullopt;
  return Change{d.id, before, d.state};
}

std::optional<View::Change> View::set_state(const PeerId& id, MemberState s, double now) {
  Member* m = find(id);
  if (!m || m->d.state == s) return std::nullopt;
  const MemberState before = m->d.state;
  m->d.state = s;
  state_changed(*m, before);
  if (s == MemberState::Suspect) m->suspect_since = now;
  return Change{id, before, s};
}

void View::state_changed(Member& m, MemberState before) {
  const bool was_live = before == MemberState::Alive || before == MemberState::Suspect;
  live_count_ = live_count_ - was_live + m.live();
  live_trainers_ = live_trainers_ - (was_live && !m.d.done) + m.live_trainer();
  dead_count_ = dead_count_ - (before == MemberState::Dead) + (m.d.state == MemberState::Dead);
  const bool was_alive = before == MemberState::Alive, is_alive = m.d.state == MemberState::Alive;
  if (was_alive && !is_alive) {
    // Swap-remove: O(1), and the resulting order is still a function of the merge history.
    Member* last = alive_.back();
    alive_[m.alive_pos] = last;
    last->alive_pos = m.alive_pos;
    alive_.pop_back();
    m.alive_pos = static_cast<std::size_t>(-1);
  } else if (!was_alive && is_alive) {
    m.alive_pos = alive_.size();
    alive_.push_back(&m);
  }
  if (is_alive) drop_news(&m);
  else if (m.d.state != before) add_news(&m);
}

void View::add_news(Member* m) {
  drop_news(m);
  if (news_size_ == kNews) {
    std::copy(news_.begin() + 1, news_.end(), news_.begin());
    --news_size_;
  }
  news_[news_size_++] = m;
}

void View::drop_news(const Member* m) {
  const auto end = news_.begin() + static_cast<std::ptrdiff_t>(news_size_);
  const auto it = std::find(news_.begin(), end, m);
  if (it != end) {
    std::copy(it + 1, end, it);
    --news_size_;
  }
}

bool View::erase(const PeerId& id) {
  const std::size_t slot = index_slot(id, id_hash(id));
  if (slot == index_.size()) return false;
  erase_at(slot);
  return true;
}

void View::erase(Member* m) {
  // Its slot: the probe run from its id's home, compared by address (no strings).
  const std::size_t mask = index_.size() - 1;
  std::size_t i = m->hash & mask;
  while (index_[i].member != m) {
    RUMOR_CHECK(index_[i].member != nullptr);
    i = (i + 1) & mask;
  }
  erase_at(i);
}

void View::erase_at(std::size_t slot) {
  Member& m = *index_[slot].member;
  live_count_ -= m.live();
  live_trainers_ -= m.live_trainer();
  dead_count_ -= m.d.state == MemberState::Dead;
  if (m.d.state == MemberState::Alive) {
    Member* last = alive_.back();
    alive_[m.alive_pos] = last;
    last->alive_pos = m.alive_pos;
    alive_.pop_back();
  }
  drop_news(&m);
  // all_ keeps the order learnt (digest()'s sampling reads it): remove in place.
  all_.erase(std::find(all_.begin(), all_.end(), &m));
  const auto pos = sorted_place(m.d.id, id_key(m.d.id));
  RUMOR_CHECK(pos != sorted_.end() && pos->member == &m);
  sorted_.erase(pos);
  index_erase_at(slot);
  release(&m);
}

Member* View::allocate() {
  if (!free_.empty()) {
    Member* m = free_.back();
    free_.pop_back();
    return m;
  }
  if (last_chunk_used_ == last_chunk_size_) {
    last_chunk_size_ = std::min<std::size_t>(std::size_t{8} << std::min<std::size_t>(chunks_.size(), 7), 1024);
    chunks_.push_back(std::make_unique<Member[]>(last_chunk_size_));
    last_chunk_used_ = 0;
  }
  return &chunks_.back()[last_chunk_used_++];
}

void View::release(Member* m) {
  *m = Member{};
  free_.push_back(m);
}

std::vector<View::Ordered>::iterator View::sorted_place(std::string_view id, std::uint64_t key) {
  return std::lower_bound(sorted_.begin(), sorted_.end(), key, [&](const Ordered& o, std::uint64_t k) {
    return o.key != k ? o.key < k : std::string_view(o.member->d.id) < id;
  });
}

std::size_t View::Members::count(std::string_view id) const {
  // A plain search by the ids themselves (not the keys): tests check the list's order with it.
  const auto pos = std::lower_bound(v_->begin(), v_->end(), id,
                                    [](const Ordered& o, std::string_view x) { return o.member->d.id < x; });
  return pos != v_->end() && pos->member->d.id == id ? 1 : 0;
}

Member* View::find(const PeerId& id) { return index_find(id, id_hash(id)); }
const Member* View::find(const PeerId& id) const { return index_find(id, id_hash(id)); }

Member* View::index_find(std::string_view id, std::size_t h) const {
  const std::size_t i = index_slot(id, h);
  return i == index_.size() ? nullptr : index_[i].member;
}

std::size_t View::index_slot(std::string_view id, std::size_t h) const {
  if (index_.empty()) return 0;
  const std::size_t mask = index_.size() - 1;
  for (std::size_t i = h & mask;; i = (i + 1) & mask) {
    const IndexSlot& s = index_[i];
    if (!s.member) return index_.size();
    if (s.hash == h && s.member->d.id == id) return i;
  }
}

void View::index_insert(Member* m, std::size_t hash) {
  if (2 * (index_used_ + 1) > index_.size()) {
    std::vector<IndexSlot> old(std::max<std::size_t>(16, 2 * index_.size()));
    old.swap(index_);
    index_used_ = 0;
    for (const IndexSlot& s : old)
      if (s.member) index_insert(s.member, s.hash);
  }
  const std::size_t mask = index_.size() - 1;
  std::size_t i = hash & mask;
  while (index_[i].member) i = (i + 1) & mask;
  index_[i] = {hash, m};
  ++index_used_;
}

void View::index_erase_at(std::size_t i) {
  const std::size_t mask = index_.size() - 1;
  index_[i] = {};
  --index_used_;
  // Backward shift: move later entries of the probe run into the hole when their home slot
  // allows it, so lookups never need tombstones.
  for (std::size_t j = (i + 1) & mask; index_[j].member; j = (j + 1) & mask) {
    const std::size_t k = index_[j].hash & mask;
    const bool movable = i <= j ? (k <= i || k > j) : (k <= i && k > j);
    if (movable) {
      index_[i] = index_[j];
      index_[j] = {};
      i = j;
    }
  }
}

std::vector<PeerId> View::live_ids() const {
  std::vector<PeerId> out;
  for (const Ordered& o : sorted_)
    if (o.member->live()) out.push_back(o.member->d.id);
  return out;
}

std::vector<MemberDigest> View::digest(std::size_t limit, Rng& rng) const {
  std::vector<MemberDigest> out;
  out.reserve(std::min(limit, sorted_.size() + 1));
  out.push_back(self_);
  if (limit <= 1) return out;
  if (sorted_.size() + 1 <= limit) {
    for (const Ordered& o : sorted_) out.push_back(o.member->d);
    return out;
  }
  // A uniform random subset of limit-1 members, without touching the other thousands: a
  // partial Fisher-Yates shuffle of the indices 0..n-1 whose few swapped entries are kept in
  // a small list (index -> value) instead of an n-element array.
  const std::size_t n = all_.size(), k = limit - 1;
  if (n <= 8 * k) {
    // A small view (partial views): the same draws on a dense permutation, so the same subset
    // as below at O(n) instead of O(k^2).
    std::uint32_t small[256];  // on the stack for the usual sizes: no allocation per message
    std::vector<std::uint32_t> large(n > 256 ? n : 0);
    std::uint32_t* perm = n > 256 ? large.data() : small;
    for (std::size_t i = 0; i < n; ++i) perm[i] = static_cast<std::uint32_t>(i);
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t j = i + rng.below(n - i);
      std::swap(perm[i], perm[j]);
      out.push_back(all_[perm[i]]->d);
    }
    return out;
  }
  std::vector<std::pair<std::size_t, std::size_t>> moved;  // sparse permutation, k*2 entries at most
  moved.reserve(2 * k);
  const auto at = [&](std::size_t i) {
    for (const auto& [idx, val] : moved)
      if (idx == i) return val;
    return i;
  };
  const auto put = [&](std::size_t i, std::size_t v) {
    for (auto& [idx, val] : moved)
      if (idx == i) {
        val = v;
        return;
      }
    moved.emplace_back(i, v);
  };
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t j = i + rng.below(n - i);
    const std::size_t vi = at(i), vj = at(j);
    put(i, vj);
    put(j, vi);
    out.push_back(all_[vj]->d);
  }
  return out;
}

std::vector<MemberDigest> View::digest_partial(std::size_t limit, std::size_t news, std::size_t sample, Rng& rng) const {
  std::vector<MemberDigest> out;
  out.reserve(1 + news + sample);
  out.push_back(self_);
  const auto full = [&] { return out.size() >= limit; };
  const auto has = [&](const PeerId& id) {
    return std::any_of(out.begin() + 1, out.end(), [&](const MemberDigest& x) { return x.id == id; });
  };
  // News: a uniform `news` of the recent changes (all of them when fewer).
  std::size_t picked = 0;
  std::uint64_t taken = 0;  // bit i: news_[i] already in
  while (picked < std::min(news, news_size_) && !full()) {
    std::size_t i = rng.below(news_size_ - picked);
    for (std::size_t j = 0;; ++j)  // the i-th not yet taken
      if (!(taken >> j & 1) && i-- == 0) {
        taken |= std::uint64_t{1} << j;
        out.push_back(news_[j]->d);
        break;
      }
    ++picked;
  }
  // The sample: distinct members, uniform over the view, news already in skipped (a view
  // smaller than news + sample gives them all).
  const std::size_t n = all_.size();
  const std::size_t want = std::min(sample, n - std::min(n, picked));
  for (std::size_t tries = 0; out.size() < 1 + picked + want && !full() && tries < 8 * (want + 1); ++tries) {
    const Member* m = all_[rng.below(n)];
    if (!has(m->d.id)) out.push_back(m->d);
  }
  return out;
}

}  // namespace rumor
