// The int4 codec's per-pair references (CHOCO-SGD style error feedback; `--codec int4`).
//
// Quantising absolute parameters to 4 bits would stop consensus at the quantisation step: two
// models closer than that encode alike and never move closer. So each side of a pair keeps,
// for each partner, the last value of each model as the other side decoded it:
//   mine    my model as the partner knows it (what it decoded from me last time),
//   theirs  the partner's model as I decoded it.
// An exchange sends Q4(x - ref) (core/codec.hpp), both sides reconstruct x̂ = ref + decoded,
// mix with x̂ and ŷ as the other lossy codecs do (so the weighted sum is still conserved), and
// set the references to x̂ and ŷ. What Q4 dropped stays in the live parameters and shows in
// x - ref the next time: that is the error feedback, and the residual shrinks with the models'
// distance, so consensus goes on far below the 4-bit step.
//
// The two sides' references must be equal, bit for bit. They are set only when a side mixes,
// so a lost reply or accept, a restart, or an eviction leaves them apart; the request carries
// a hash of the initiator's (hash_pair, XXH3 over the range), and when the responder's differ
// (or either side has none for the range) that exchange sends absolute int8 both ways and
// both set their references from it (docs/wire.md "int4"). With fragments the references
// are the same whole-model vectors, set and hashed one fragment's range at a time; `valid`
// says which ranges have been set since the entry was made.
//
// Memory: 2 x the model's float32 per partner, for at most `capacity` partners
// (GossipConfig::int4_partners, `--codec-partners`, default kInt4RefPartners = 8) besides those
// with an exchange in progress, which are never evicted; the least recently used goes first.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/message.hpp"

namespace rumor {

constexpr std::size_t kInt4RefPartners = 8;  // the default of GossipConfig::int4_partners

struct PairRefs {
  PeerId peer;
  std::vector<float> mine, theirs;  // whole-model vectors; only `valid` ranges mean anything
  std::vector<std::uint8_t> valid;  // per fragment
  std::uint64_t used = 0;           // LRU stamp
};

class CodecRefs {
 public:
  explicit CodecRefs(std::size_t capacity = kInt4RefPartners) : capacity_(capacity) {}
  // The entry for `peer`, or null (marks it used).
  PairRefs* find(const PeerId& peer);
  // The entry for `peer`, made (zeroed, nothing valid) if there is none. Makes room first:
  // while `capacity` entries exist, the least recently used one that `pinned` says is not in
  // an exchange is dropped (if every one is, the set grows beyond capacity for a while).
  PairRefs& get(const PeerId& peer, std::size_t n, std::size_t fragments, const std::function<bool(const PeerId&)>& pinned);
  void drop(const PeerId& peer);
  std::size_t size() const { return refs_.size(); }
  std::size_t capacity() const { return capacity_; }
  const std::vector<PairRefs>& entries() const { return refs_; }

  // The hash both sides compare: the initiator's model's reference first, then the
  // responder's, over one range; never 0 (0 on the wire: "no references").
  static std::uint64_t hash_pair(std::span<const float> initiator_model, std::span<const float> responder_model);

 private:
  std::size_t capacity_;
  std::uint64_t clock_ = 0;
  std::vector<PairRefs> refs_;
};

}  // namespace rumor
