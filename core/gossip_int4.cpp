// Gossip: the int4 codec's exchanges (core/codec_refs.hpp has the scheme). The exchange is the
// streamed one of gossip_exchange.cpp: the request carries the hash of the initiator's
// references of the pair over the fragment's range (0: it holds none) and says whether the
// x_s that follows it is the residual Q4(x - ref) or, without references, absolute int8. The
// responder compares the hash with its own: equal, it replies with Q4(y - ref) and decodes x_s
// against its references; not equal (or 0), it replies with absolute int8 and `absolute` set,
// ignores a residual x_s, and the initiator, reading that reply, sends x_s again as int8 (the
// only case that costs one more one-way trip). Both sides mix the decoded x̂ and ŷ, then set
// their references of the range to them.
//
// (A first version sent x_s only after the reply, always: the responder then held its
// snapshot for a round trip instead of a one-way trip, more exchanges overlapped on it, and
// with two in flight per peer a peer's own weight in its model went negative and the
// in-memory cluster diverged, as docs/ARCHITECTURE.md says three in flight do.)
#include <algorithm>

#include "core/check.hpp"
#include "core/gossip.hpp"
#include "core/mix.hpp"
#include "core/serial.hpp"

namespace rumor {

std::uint64_t Gossip::int4_hash(const PeerId& peer, const ExchangeMsg& h, bool initiator) {
  PairRefs* r = refs_.find(peer);
  if (!r || r->mine.size() != params_.size() || r->valid.size() != fragments_ || !r->valid[h.fragment]) return 0;
  const std::size_t lo = static_cast<std::size_t>(h.range_lo()), len = static_cast<std::size_t>(h.range_len());
  const std::span<const float> mine = std::span<const float>(r->mine).subspan(lo, len);
  const std::span<const float> theirs = std::span<const float>(r->theirs).subspan(lo, len);
  return initiator ? CodecRefs::hash_pair(mine, theirs) : CodecRefs::hash_pair(theirs, mine);
}

void Gossip::int4_encode(const PeerId& peer, const ExchangeMsg& h, bool absolute, SentSnapshot& snap) {
  const std::span<const float> x = range_of(h);
  std::shared_ptr<Bytes> b;
  snap.decoded.resize(x.size());
  if (absolute) {
    b = std::make_shared<Bytes>(encode_dense(PayloadCodec::Int8, x));
    decode_dense(PayloadCodec::Int8, *b, snap.decoded);
  } else {
    PairRefs* r = refs_.find(peer);
    RUMOR_CHECK(r && r->valid[h.fragment], "int4: encoding against references we do not hold");
    const float* ref = r->mine.data() + h.range_lo();
    std::vector<float> residual(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) residual[i] = x[i] - ref[i];
    b = std::make_shared<Bytes>(encode_dense(PayloadCodec::Int4, residual));
    decode_dense(PayloadCodec::Int4, *b, snap.decoded);
    // x̂ = ref + decoded, added exactly as the receiver adds it (int4_decode), so both hold
    // the same bits.
    for (std::size_t i = 0; i < x.size(); ++i) snap.decoded[i] = ref[i] + snap.decoded[i];
  }
  snap.chunks = {b};
}

std::string Gossip::int4_decode(const PeerId& peer, const Message& msg, const ExchangeMsg& h, bool absolute,
                                std::vector<float>& out) {
  if (!msg.payload) return "exchange without parameters";
  out.resize(static_cast<std::size_t>(h.range_len()));
  try {
    if (absolute) {
      decode_dense(PayloadCodec::Int8, *msg.payload, out);
    } else {
      PairRefs* r = refs_.find(peer);
      if (!r || r->mine.size() != params_.size() || r->valid.size() != fragments_ || !r->valid[h.fragment])
        return "int4: a residual payload, and we hold no references with this peer for its range";
      decode_dense(PayloadCodec::Int4, *msg.payload, out);
      const float* ref = r->theirs.data() + h.range_lo();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = ref[i] + out[i];
    }
  } catch (const DecodeError& e) {
    return e.what();
  }
  if (!all_finite(out)) return "non-finite parameters (NaN or Inf) in the payload";
  return {};
}

void Gossip::int4_commit(const PeerId& peer, const ExchangeMsg& h, std::span<const float> mine, std::span<const float> theirs) {
  PairRefs& r = refs_.get(peer, params_.size(), fragments_, [this](const PeerId& p) { return refs_pinned(p); });
  const std::size_t lo = static_cast<std::size_t>(h.range_lo());
  RUMOR_CHECK(mine.size() == h.range_len() && theirs.size() == h.range_len());
  std::copy(mine.begin(), mine.end(), r.mine.begin() + static_cast<std::ptrdiff_t>(lo));
  std::copy(theirs.begin(), theirs.end(), r.theirs.begin() + static_cast<std::ptrdiff_t>(lo));
  r.valid[h.fragment] = 1;
}

void Gossip::int4_reply(std::size_t index, const Message& msg, const ExchangeMsg& h) {
  Outstanding& o = out_[index];
  const PeerId peer = o.peer;
  std::string problem = o.absolute && !h.absolute ? "int4: a residual reply to a request without references" : "";
  if (problem.empty()) problem = int4_decode(peer, msg, h, h.absolute, o.reply_decoded);
  if (!problem.empty()) {
    out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(index));
    ++stats_.failed;
    return reject(peer, problem);
  }
  if (h.absolute && !o.absolute) {
    // The responder's references differ from ours (a lost reply or accept, a restart, an
    // eviction): it ignores our residual x_s, and this exchange goes absolute both ways.
    o.absolute = true;
    ++stats_.int4_absolute;
    ExchangeMsg xh = our_exchange_header(o.id, o.weight, o.fragment, PayloadCodec::Int4);
    xh.absolute = true;
    int4_encode(peer, xh, true, o.snap);
    env_.send(peer, make_message(MsgType::ExchangePayload, xh, o.snap.chunks.front()));
    stats_.payload_bytes_sent += o.snap.bytes();
    ++stats_.payloads_sent;
  } else if (h.absolute) {
    ++stats_.int4_absolute;
  }
  o.reply.chunks = {msg};
  o.reply_complete = true;
  if (o.accepted) complete_exchange(index);
}

}  // namespace rumor
