// Partial views (HyParView, Leitao, Pereira and Rodrigues, DSN 2007): which members a peer
// exchanges with and probes (the active view, about log2 n + 1, kept symmetric: a link is made
// by Neighbor/NeighborAccept and broken by Disconnect), and which it knows as candidates to
// repair it with (the passive view, about 6 times larger, refreshed by shuffles that walk the
// overlay). Pure bookkeeping: no messages, no clock, randomness only through the Rng passed
// in. Gossip (core/gossip_overlay.cpp) owns one and keeps View (core/view.hpp) to these
// members, so a peer's memory is O(view), not O(n).
//
// Invariants: active and passive are disjoint, never hold ourselves, and stay within their
// capacities; a member is in `pending` only while it is in passive.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/flat_map.hpp"
#include "core/message.hpp"
#include "core/rng.hpp"

namespace rumor {

class Overlay {
 public:
  Overlay(std::size_t active_cap, std::size_t passive_cap) : active_cap_(active_cap), passive_cap_(passive_cap) {}

  std::size_t active_cap() const { return active_cap_; }
  std::size_t passive_cap() const { return passive_cap_; }
  const std::vector<PeerId>& active() const { return active_; }
  const std::vector<PeerId>& passive() const { return passive_; }
  // View::hash_of() of each id of active() and passive(), in the same order.
  const std::vector<std::size_t>& active_hashes() const { return active_h_; }
  const std::vector<std::size_t>& passive_hashes() const { return passive_h_; }
  bool in_active(const PeerId& id) const;
  bool in_passive(const PeerId& id) const;
  // The same with the id's hash (View::hash_of) already computed.
  bool in_active(const PeerId& id, std::size_t hash) const;
  bool in_passive(const PeerId& id, std::size_t hash) const;
  // In either view (one lookup).
  bool in_views(const PeerId& id, std::size_t hash) const { return slot_of(id, hash) != slots_.size(); }
  bool active_full() const { return active_.size() >= active_cap_; }

  // Adds `id` to the active view (out of the passive view). If the view was full, a random
  // other member is dropped to the passive view and returned (the caller sends it Disconnect).
  // (add_active, demote and remove take the id by value: they move entries of the views, so a
  // reference into one, e.g. passive()[0], would change under them.)
  std::optional<PeerId> add_active(PeerId id, Rng& rng);
  // Adds `id` to the passive view unless it is active; a full view drops a random entry, which
  // is returned (the caller forgets it unless it is used elsewhere).
  std::optional<PeerId> add_passive(const PeerId& id, Rng& rng);
  // The same with the id's hash already computed; the dropped entry's hash goes to *dropped_hash.
  std::optional<PeerId> add_passive(const PeerId& id, std::size_t hash, Rng& rng, std::size_t* dropped_hash);
  // Moves an active member to the passive view (Disconnect received, suspected). True if it was active.
  bool demote(PeerId id, Rng& rng);
  // Forgets `id` everywhere (dead, left, unreachable). True if it was in either view.
  bool remove(PeerId id);

  // A uniformly random member of a view, excluding up to two ids; empty if none.
  PeerId random_active(Rng& rng, const PeerId& not1 = {}, const PeerId& not2 = {}) const;
  PeerId random_passive(Rng& rng, const PeerId& not1 = {}) const;
  // Up to k distinct random members of a view.
  std::vector<PeerId> sample_active(std::size_t k, Rng& rng) const;
  std::vector<PeerId> sample_passive(std::size_t k, Rng& rng) const;

  // Neighbor requests sent and not answered: id -> when asked.
  FlatMap<PeerId, double> pending;
  // Members that declined a Neighbor request: not asked again before the time given.
  FlatMap<PeerId, double> declined;
  // Members we learnt are dead or left, and when: their stale digests are not taken back into
  // the passive view for a while (a bounded list; core/gossip_overlay.cpp).
  FlatMap<PeerId, double> buried;
  // While joining: members that said they have a model to give (a state transfer's sources).
  std::set<PeerId> ready;

 private:
  static std::vector<PeerId> sample(const std::vector<PeerId>& v, std::size_t k, Rng& rng);
  // Each view's ids, with their hashes beside them in the same order, and one small
  // open-addressing table over both views (slots_): a membership test (a few per digest entry
  // received, about 16 per message) probes a slot or two instead of scanning the views.
  // A slot holds a code (0: empty), a view's tag and an index in it (code()), beside the low
  // 32 bits of the id's hash: a probe compares those and reads the id only on a match, so a
  // lookup touches one line of the table (the views' lines only for the member it finds).
  // Linear probing from the hash, backward-shift deletion (no tombstones), as View's index.
  static constexpr std::uint32_t kPassiveTag = 1u << 31;
  static std::uint32_t code(bool passive, std::size_t i) {
    return (passive ? kPassiveTag : 0u) | static_cast<std::uint32_t>(i + 1);
  }
  const PeerId& id_at(std::uint32_t c) const { return (c & kPassiveTag ? passive_ : active_)[(c & ~kPassiveTag) - 1]; }
  std::size_t slot_of(const PeerId& id, std::size_t h) const;  // slots_.size() if absent
  std::size_t slot_of(std::uint32_t c, std::size_t h) const;   // the slot holding code c
  void slot_insert(std::uint32_t c, std::size_t h);
  void slot_erase(std::size_t slot);
  struct Ids {
    Overlay& o;
    bool passive;
    std::vector<PeerId>& ids;
    std::vector<std::size_t>& hashes;
    std::size_t find(const PeerId& id, std::size_t h) const;  // ids.size() if absent
    void push(const PeerId& id, std::size_t h);
    void put(std::size_t i, const PeerId& id, std::size_t h);
    bool erase(const PeerId& id, std::size_t h);  // swap-remove
  };
  Ids active_ids() { return {*this, false, active_, active_h_}; }
  Ids passive_ids() { return {*this, true, passive_, passive_h_}; }
  std::size_t active_cap_, passive_cap_;
  std::vector<PeerId> active_, passive_;
  std::vector<std::size_t> active_h_, passive_h_;
  struct Slot {
    std::uint32_t code = 0;
    std::uint32_t hash = 0;  // the low 32 bits of the id's hash (and so its home slot)
  };
  std::vector<Slot> slots_;
  std::size_t slots_used_ = 0;
};

// log2(n) + 1, at least 4: the active view's default size for an estimated swarm of n.
std::size_t default_active_view(std::size_t n);

}  // namespace rumor
