// The int4 codec's per-pair references: see core/codec_refs.hpp.
#include "core/codec_refs.hpp"

#include <algorithm>

#include "core/hash.hpp"

namespace rumor {

PairRefs* CodecRefs::find(const PeerId& peer) {
  for (auto& r : refs_)
    if (r.peer == peer) {
      r.used = ++clock_;
      return &r;
    }
  return nullptr;
}

PairRefs& CodecRefs::get(const PeerId& peer, std::size_t n, std::size_t fragments,
                         const std::function<bool(const PeerId&)>& pinned) {
  if (PairRefs* r = find(peer)) {
    if (r->mine.size() == n && r->valid.size() == fragments) return *r;
    drop(peer);  // another model size or cut: start again
  }
  while (refs_.size() >= capacity_) {
    auto victim = refs_.end();
    for (auto it = refs_.begin(); it != refs_.end(); ++it)
      if (!pinned(it->peer) && (victim == refs_.end() || it->used < victim->used)) victim = it;
    if (victim == refs_.end()) break;
    refs_.erase(victim);
  }
  PairRefs r;
  r.peer = peer;
  r.mine.assign(n, 0.0f);
  r.theirs.assign(n, 0.0f);
  r.valid.assign(fragments, 0);
  r.used = ++clock_;
  refs_.push_back(std::move(r));
  return refs_.back();
}

void CodecRefs::drop(const PeerId& peer) {
  std::erase_if(refs_, [&](const PairRefs& r) { return r.peer == peer; });
}

std::uint64_t CodecRefs::hash_pair(std::span<const float> initiator_model, std::span<const float> responder_model) {
  Hasher64 h(0x52554D4F52494E34ull);  // "RUMORIN4"
  h.update({reinterpret_cast<const std::uint8_t*>(initiator_model.data()), initiator_model.size_bytes()});
  h.update({reinterpret_cast<const std::uint8_t*>(responder_model.data()), responder_model.size_bytes()});
  const std::uint64_t d = h.digest();
  return d == 0 ? 1 : d;
}

}  // namespace rumor
