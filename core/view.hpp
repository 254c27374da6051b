// A peer's view of the swarm: the members it knows of, with SWIM-style incarnation numbers and
// states, and what it has learnt of each one's clock (local steps done).
//
// Merge rule (applied to every digest piggybacked on a message): a higher incarnation wins;
// at equal incarnation the more severe state wins (Alive < Suspect < Dead, Left). Dead and Left
// members are kept as tombstones so stale gossip cannot bring them back; a member that returns
// (a resumed peer) does so with a higher incarnation. Clocks only ever move forward.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
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
  // Version 6: the samples it has trained on, and whether it has finished training (settling
  // or later: it will not step again in this incarnation). Trainers prefer partners that are
  // still training; the staleness bound no longer waits for a finished member.
  std::uint64_t samples = 0;
  bool done = false;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(id, incarnation, state, clock, samples, done);
  }
};

struct Member {
  // View::hash_of(d.id), kept so that erasing the member or scanning the view never hashes
  // its id again (first: in the cache line of the id's first bytes).
  std::size_t hash = 0;
  MemberDigest d;
  double last_heard = 0;      // local time we last heard from it directly
  double skip_until = 0;      // do not pick it as a neighbour before this (after a failure)
  int failures = 0;           // consecutive failed exchanges
  // Its last model was refused or clipped (bad input, robust mixing): picked as a partner only
  // when no other is left (Gossip::start_exchange).
  bool screened = false;
  double suspect_since = 0;   // when it became Suspect
  std::size_t alive_pos = static_cast<std::size_t>(-1);  // index in View::alive() while Alive
  // Its pace: seconds per step, from its clock's advance between the digests we heard (an
  // average that leans on recent ones; 0: not seen advancing yet), and when it last advanced.
  double step_seconds = 0;
  double clock_seen = -1;
  // Our last exchange with it that mixed (either role): the distance between the models then
  // (NaN: none yet), its clock then, and our Gossip::model_version() right after the mix.
  double ex_distance = NAN;
  std::uint64_t ex_clock = 0, ex_version = 0;
  // Fragments (GossipConfig::fragments > 1): the fragments found equal since either model last
  // changed (bit k: fragment k); ex_distance says "equal" only once every bit is set.
  std::uint64_t ex_agree = 0;
  bool live() const { return d.state == MemberState::Alive || d.state == MemberState::Suspect; }
  bool live_trainer() const { return live() && !d.done; }
};

class View {
 public:
  explicit View(MemberDigest self) : self_(std::move(self)) {}
  // The lists and the index point at members in chunks_ (which never move): a copy would
  // point into the original.
  View(const View&) = delete;
  View& operator=(const View&) = delete;
  View(View&&) = default;
  View& operator=(View&&) = default;

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
  // The same, for a caller that has just looked the member up: `known` is find(d.id, hash)
  // (nullptr if not known) and `hash` is hash_of(d.id), which saves the second lookup and the
  // hashing on the hot path of partial views. A member newly learnt is written to *added (when
  // given); members never move while held.
  std::optional<Change> merge(const MemberDigest& d, double now, Member* known, Member** added, std::size_t hash);
  // Local decisions (failure detector, graceful leave).
  std::optional<Change> set_state(const PeerId& id, MemberState s, double now);
  // Forgets a member altogether (partial views keep View to the members of their views).
  // Its samples stay counted in others_samples(). False if it was not known.
  bool erase(const PeerId& id);
  // The same for a member just found (find()): no second search by id.
  void erase(Member* m);

  Member* find(const PeerId& id);
  const Member* find(const PeerId& id) const;
  // The same with the id's hash_of() already computed (a digest entry is hashed once on its
  // way through merge_view, the view and the overlay).
  Member* find(std::string_view id, std::size_t hash) const { return index_find(id, hash); }
  // The hash the index uses: std::hash of the id's bytes (std::hash<PeerId> gives the same).
  static std::size_t hash_of(std::string_view id) { return std::hash<std::string_view>{}(id); }

  // One entry of the id-ordered list: the id's first 8 bytes as a big-endian number (zeros
  // after a shorter id) beside the member, so that finding a place in the list compares
  // numbers and reads a member only when two ids share their first 8 bytes (the simulator's
  // ids never do). Keys never contradict the ids' order: the first byte that differs decides
  // both, and a shorter id reads as zeros past its end, which no byte is below.
  struct Ordered {
    std::uint64_t key = 0;
    Member* member = nullptr;
  };
  // Every member held, in id order: the order every scan of the view follows, so that a run
  // is a function of its inputs (the simulator's determinism).
  class Members {
   public:
    class iterator {
     public:
      using iterator_category = std::forward_iterator_tag;
      using value_type = Member;
      using difference_type = std::ptrdiff_t;
      using pointer = const Member*;
      using reference = const Member&;
      iterator() = default;
      explicit iterator(std::vector<Ordered>::const_iterator it) : it_(it) {}
      const Member& operator*() const { return *it_->member; }
      const Member* operator->() const { return it_->member; }
      iterator& operator++() {
        ++it_;
        return *this;
      }
      iterator operator++(int) {
        iterator old = *this;
        ++it_;
        return old;
      }
      bool operator==(const iterator& o) const { return it_ == o.it_; }
      bool operator!=(const iterator& o) const { return it_ != o.it_; }

     private:
      std::vector<Ordered>::const_iterator it_;
    };
    explicit Members(const std::vector<Ordered>& v) : v_(&v) {}
    iterator begin() const { return iterator(v_->begin()); }
    iterator end() const { return iterator(v_->end()); }
    std::size_t size() const { return v_->size(); }
    bool empty() const { return v_->empty(); }
    // 1 if a member with this id is held, else 0 (a binary search of the ordered list: no
    // use of the hash index, so tests can check one against the other).
    std::size_t count(std::string_view id) const;

   private:
    const std::vector<Ordered>* v_;
  };
  Members members() const { return Members(sorted_); }
  std::vector<PeerId> live_ids() const;
  std::size_t live_count() const { return live_count_; }  // Alive or Suspect, excluding ourselves
  // The live members that have not said they finished training (excluding ourselves): how many
  // peers' gradients reach our model through averaging (PeerLoop::lr_scale).
  std::size_t live_trainers() const { return live_trainers_; }
  // The samples of every member we have heard of, in any state (those that left or died
  // included: their work is in the swarm's models), each counted once at the largest count
  // heard: excluding ourselves.
  std::uint64_t others_samples() const { return others_samples_; }
  // How many members we hold Dead (each probe interval pings one of them: Gossip::ping_dead).
  std::size_t dead_count() const { return dead_count_; }
  // The members now Alive, in an order that depends only on the history of merges (so it is
  // deterministic): lets a peer of a 10,000-member swarm pick a neighbour in O(1).
  const std::vector<Member*>& alive() const { return alive_; }
  // Up to `limit` digests (ourselves first, then the others in id order, or a uniformly random
  // subset when there are more, drawn in O(limit)) to piggyback on a message.
  std::vector<MemberDigest> digest(std::size_t limit, Rng& rng) const;
  // The digest of partial views (Gossip::digest): ourselves, then up to `news` of the members
  // that most recently stopped being Alive (SWIM's dissemination of changes: Suspect, Dead,
  // Left), then `sample` others drawn uniformly, `limit` entries at most. A receiver keeps
  // only news of members it holds and two fresh members (Gossip::merge_view), and with 100,000
  // peers it holds almost none of a random sample: drawing, encoding and looking up a sample
  // of 13 was a third of the simulator's time at 1,000 peers (docs/sim.md, "Partial views").
  std::vector<MemberDigest> digest_partial(std::size_t limit, std::size_t news, std::size_t sample, Rng& rng) const;
  // The members that most recently stopped being Alive (or were learnt not Alive), newest
  // last, kNews at most: the news digest_partial() spreads first.
  static constexpr std::size_t kNews = 8;
  std::span<Member* const> news() const { return {news_.data(), news_size_}; }

 private:
  void state_changed(Member& m, MemberState before);
  void erase_at(std::size_t slot);  // the member in index_[slot]
  // Storage. Members live in chunks that never move (8, 16, ... up to 1,024 members each, so
  // a partial view's 50 members sit in a few kilobytes), reused through a free list: no
  // allocation per member learnt, and a peer's members close together in memory. (A std::map
  // node per member cost a tenth of a 1,000-peer simulation in tree rebalancing and malloc,
  // with partial views replacing about 3 passive members per message.)
  Member* allocate();
  void release(Member* m);
  std::vector<std::unique_ptr<Member[]>> chunks_;
  std::size_t last_chunk_used_ = 0, last_chunk_size_ = 0;
  std::vector<Member*> free_;
  // Lookups by id: an open-addressing hash table (linear probing, backward-shift deletion) of
  // the members with their ids' hashes. Every digest entry of every message is looked up, most
  // of them misses with partial views, so this is the membership's hot path (the std::map of
  // string ids spent a third of a 1,000-peer simulation comparing strings); a miss compares
  // hashes only. Its order is never iterated. At most half full: 32 to 64 bytes per member.
  struct IndexSlot {
    std::size_t hash = 0;
    Member* member = nullptr;  // nullptr: an empty slot
  };
  Member* index_find(std::string_view id, std::size_t hash) const;
  std::size_t index_slot(std::string_view id, std::size_t hash) const;  // index_.size() if absent
  void index_insert(Member* m, std::size_t hash);
  void index_erase_at(std::size_t i);
  std::vector<IndexSlot> index_;
  std::size_t index_used_ = 0;

  MemberDigest self_;
  // Where id belongs in sorted_ (the first entry not before it).
  std::vector<Ordered>::iterator sorted_place(std::string_view id, std::uint64_t key);
  std::vector<Ordered> sorted_;  // every member, ordered by id (members())
  std::vector<Member*> all_;     // every member, in the order learnt
  std::vector<Member*> alive_;   // the Alive ones; Member::alive_pos indexes it
  // news(): a member at most once, still not Alive, oldest first. Held in the View itself:
  // most merges and every erase read it, and a heap block of its own was one more cache
  // line and page per peer to fetch in a large simulation.
  std::array<Member*, kNews> news_{};
  std::size_t news_size_ = 0;
  void add_news(Member* m);
  void drop_news(const Member* m);
  std::size_t live_count_ = 0;
  std::size_t live_trainers_ = 0;
  std::size_t dead_count_ = 0;
  std::uint64_t others_samples_ = 0;
};

}  // namespace rumor
