// A peer's view of the swarm: the members it knows of, with SWIM-style incarnation numbers and
// states, and what it has learnt of each one's clock (local steps done).
//
// Merge rule (applied to every digest piggybacked on a message): a higher incarnation wins;
// at equal incarnation the more severe state wins (Alive < Suspect < Dead, Left). Dead and Left
// members are kept as tombstones so stale gossip cannot bring them back; a member that returns
// (a resumed peer) does so with a higher incarnation. Clocks only ever move forward.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "core/message.hpp"
#include "core/rng.hpp"

namespace rumor {

// Incarnations start at a peer's wall-clock milliseconds (about 2^41) and grow by one per
// refutation; a digest claiming more than this is impossible and ignored, so refuting it can
// never overflow.
constexpr std::uint64_t kMaxIncarnation = std::uint64_t{1} << 62;

enum class MemberState : std::uint8_t { Alive = 0, Suspect = 1, Dead = 2, Left = 3 };
const char* member_state_name(MemberState s);

// What travels on the wire about one member.
struct MemberDigest {
  PeerId id;
  std::uint64_t incarnation = 0;
  MemberState state = MemberState::Alive;
  std::uint64_t clock = 0;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(id, incarnation, state, clock);
  }
};

struct Member {
  MemberDigest d;
  double last_heard = 0;      // local time we last heard from it directly
  double skip_until = 0;      // do not pick it as a neighbour before this (after a failure)
  int failures = 0;           // consecutive failed exchanges
  double suspect_since = 0;   // when it became Suspect
  bool live() const { return d.state == MemberState::Alive || d.state == MemberState::Suspect; }
};

class View {
 public:
  explicit View(MemberDigest self) : self_(std::move(self)) {}

  const MemberDigest& self() const { return self_; }
  MemberDigest& self() { return self_; }

  // What changed for one member as a result of a merge.
  struct Change {
    PeerId id;
    std::optional<MemberState> before;  // nullopt: newly learnt
    MemberState after;
  };
  // Merges one digest (not about ourselves: the caller handles refutation). Returns the
  // change if the member's state changed or it is new.
  std::optional<Change> merge(const MemberDigest& d, double now);
  // Local decisions (failure detector, graceful leave).
  std::optional<Change> set_state(const PeerId& id, MemberState s, double now);

  Member* find(const PeerId& id);
  const Member* find(const PeerId& id) const;
  const std::map<PeerId, Member>& members() const { return members_; }
  std::vector<PeerId> live_ids() const;
  std::size_t live_count() const;  // excluding ourselves
  // Up to `limit` digests (ourselves first, then the others in id order, or a random subset
  // when there are more) to piggyback on a message.
  std::vector<MemberDigest> digest(std::size_t limit, Rng& rng) const;

 private:
  MemberDigest self_;
  std::map<PeerId, Member> members_;  // ordered, so iteration (and thus the sim) is deterministic
};

}  // namespace rumor
