#include "core/view.hpp"

#include <algorithm>

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
  if (d.incarnation > kMaxIncarnation) return std::nullopt;
  auto it = members_.find(d.id);
  if (it == members_.end()) {
    Member m;
    m.d = d;
    m.last_heard = now;
    if (d.state == MemberState::Suspect) m.suspect_since = now;
    members_.emplace(d.id, m);
    return Change{d.id, std::nullopt, d.state};
  }
  Member& m = it->second;
  m.d.clock = std::max(m.d.clock, d.clock);
  const MemberState before = m.d.state;
  bool take = d.incarnation > m.d.incarnation ||
              (d.incarnation == m.d.incarnation && severity(d.state) > severity(m.d.state));
  if (!take) return std::nullopt;
  m.d.incarnation = d.incarnation;
  m.d.state = d.state;
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
  if (s == MemberState::Suspect) m->suspect_since = now;
  return Change{id, before, s};
}

Member* View::find(const PeerId& id) {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}
const Member* View::find(const PeerId& id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

std::vector<PeerId> View::live_ids() const {
  std::vector<PeerId> out;
  for (const auto& [id, m] : members_)
    if (m.live()) out.push_back(id);
  return out;
}

std::size_t View::live_count() const {
  std::size_t n = 0;
  for (const auto& [id, m] : members_) n += m.live();
  return n;
}

std::vector<MemberDigest> View::digest(std::size_t limit, Rng& rng) const {
  std::vector<MemberDigest> out;
  out.push_back(self_);
  if (limit <= 1) return out;
  if (members_.size() + 1 <= limit) {
    for (const auto& [id, m] : members_) out.push_back(m.d);
    return out;
  }
  std::vector<const Member*> all;
  for (const auto& [id, m] : members_) all.push_back(&m);
  // Partial Fisher-Yates: a uniform random subset of limit-1 members.
  for (std::size_t i = 0; i + 1 < limit; ++i) {
    std::size_t j = i + rng.below(all.size() - i);
    std::swap(all[i], all[j]);
    out.push_back(all[i]->d);
  }
  return out;
}

}  // namespace rumor
