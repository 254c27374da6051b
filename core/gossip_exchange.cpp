// Gossip: the push-pull exchange handlers (request, reply, busy). See gossip.hpp, steps 2-4.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/gossip.hpp"
#include "core/mix.hpp"
#include "core/serial.hpp"
#include "core/sparse.hpp"

namespace rumor {

namespace {
constexpr std::size_t npos = static_cast<std::size_t>(-1);
}  // namespace

std::string Gossip::check_exchange_header(const ExchangeMsg& h) const {
  if (h.param_count != params_.size())
    return "model has " + std::to_string(h.param_count) + " parameters, ours " + std::to_string(params_.size());
  if (!accepts_codec(h.codec))
    return std::string("payload codec ") + codec_name(h.codec) + ", this swarm uses " + codec_name(cfg_.codec) +
           (cfg_.codec == PayloadCodec::Auto ? " (none, fp16 or int8, chosen per exchange)" : "");
  if (h.fragments != fragments_) return fragments_problem(h);
  if (!(h.weight > 0) || !std::isfinite(h.weight)) return "bad mixing weight";
  return {};
}

std::string Gossip::fragments_problem(const ExchangeMsg& h) const {
  return "fragments mismatch: the exchange cuts the model into " + std::to_string(h.fragments) + " fragments, this peer into " +
         std::to_string(fragments_) + " (--fragments)";
}

std::string Gossip::decode_payload(const Message& msg, const ExchangeMsg& h, std::vector<float>& scratch,
                                   std::span<const float>& out) const {
  if (auto p = check_exchange_header(h); !p.empty()) return p;
  if (!msg.payload) return "exchange without parameters";
  try {
    if (h.codec == PayloadCodec::TopK) {
      out = {};  // sparse: decoded and validated by gossip_sparse.cpp
      return {};
    }
    if (h.codec == PayloadCodec::Int4) {
      // Decoded against the references by int4_decode; without them only the size is known.
      out = {};
      const std::size_t want = encoded_size(h.absolute ? PayloadCodec::Int8 : PayloadCodec::Int4, h.range_len());
      if (msg.payload->size() != want)
        return "int4 payload of " + std::to_string(msg.payload->size()) + " bytes, expected " + std::to_string(want);
      return {};
    }
    if (h.codec == PayloadCodec::None) {
      out = payload_floats(msg, h.range_len());
    } else {
      scratch.resize(h.range_len());
      decode_dense(h.codec, *msg.payload, scratch);
      out = scratch;
    }
  } catch (const DecodeError& e) {
    return e.what();
  }
  // Raw float32: the receiving transport checked the words as they landed (payload_finite),
  // so the 100 MB are not read again for it here.
  const bool finite = h.codec == PayloadCodec::None && msg.payload_finite ? *msg.payload_finite : all_finite(out);
  if (!finite) return "non-finite parameters (NaN or Inf) in the payload";
  return {};
}

std::string Gossip::check_chunk(const Message& msg, const ExchangeMsg& h, std::span<const float>& out) const {
  if (auto p = check_exchange_header(h); !p.empty()) return p;
  if (!msg.payload) return "exchange without parameters";
  const std::uint64_t n = h.range_len(), c = h.chunk_floats();
  if (c < n && c < kMinExchangeChunk)
    return "chunks of " + std::to_string(c) + " parameters: at least " + std::to_string(kMinExchangeChunk) + " (or the whole model)";
  if ((n > 0 && h.offset >= n) || (c > 0 && h.offset % c != 0))
    return "chunk at offset " + std::to_string(h.offset) + " of a model of " + std::to_string(n) + " parameters in chunks of " +
           std::to_string(c);
  const std::size_t want = static_cast<std::size_t>(h.floats_here()) * sizeof(float);
  if (msg.payload->size() != want)
    return "payload of " + std::to_string(msg.payload->size()) + " bytes, expected " + std::to_string(want) + " (" +
           std::to_string(h.floats_here()) + " float32)";
  out = as_floats(*msg.payload);
  // The receiving transport checked the words as they landed (payload_finite), so the chunk
  // is not read again for it here.
  const bool finite = msg.payload_finite ? *msg.payload_finite : all_finite(out);
  if (!finite) return "non-finite parameters (NaN or Inf) in the payload";
  return {};
}

void Gossip::on_exchange_request(const PeerId& from, const Message& msg) {
  ExchangeMsg h;
  try {
    h = decode_exchange(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  // Without a payload (dense codecs): a streamed exchange, x_s follows in an ExchangePayload.
  const bool streamed = !msg.payload && cfg_.codec != PayloadCodec::TopK;
  // Another cut of the model (a misconfigured peer, not bad input): declined, nothing changed.
  if (accepts_codec(h.codec) && h.param_count == params_.size() && h.fragments != fragments_) {
    env_.send(from, make_message(ExchangeBusyMsg{h.exchange_id, fragments_problem(h), digest()}));
    return;
  }
  if (cfg_.codec == PayloadCodec::Int4 && !streamed) return reject(from, "int4: the request carries no payload (x_s follows the reply)");
  std::span<const float> theirs;
  if (streamed) {
    if (auto p = check_exchange_header(h); !p.empty()) return reject(from, p);
  } else if (auto p = decode_payload(msg, h, scratch_in_, theirs); !p.empty()) {
    return reject(from, p);
  }
  merge_view(h.view);
  heard_from(from);
  // A duplicate of a request we answered, busy or not (or an older one): answered already.
  {
    const std::uint64_t inc = !h.view.empty() && h.view.front().id == from ? h.view.front().incarnation : 0;
    auto& last = answered_[from];
    if (inc < last.first || (inc == last.first && h.exchange_id <= last.second)) return;
    last = {inc, h.exchange_id};
  }
  // A joiner without the swarm's model yet, or a peer on its way out, takes no part.
  if (!state_ready_ || leaving_) {
    env_.send(from, make_message(ExchangeBusyMsg{h.exchange_id, leaving_ ? "leaving" : "joining: fetching the model", digest()}));
    return;
  }
  // A pair has one exchange at a time: two, each mixed by the delta rule against the same
  // snapshots, would swap the models instead of averaging them. Crossing requests (each side
  // started one before the other's arrived): the smaller id's request wins. A request from a
  // peer that has already begun to answer ours (its reply is landing) came after it: declined.
  if (const std::size_t o = find_out(from);
      o != npos && (view_.self().id < from || !out_[o].reply.chunks.empty())) {
    env_.send(from, make_message(ExchangeBusyMsg{h.exchange_id, "crossing exchange: answer mine instead", digest()}));
    return;
  }
  // Bounded staleness: models whose clocks are too far apart are not mixed, in either direction.
  const double gap = std::abs(static_cast<double>(h.clock) - static_cast<double>(clock_));
  if (gap > cfg_.staleness) {
    ++stats_.stale;
    env_.send(from, make_message(ExchangeBusyMsg{h.exchange_id, "stale: clocks " + std::to_string(h.clock) + " and " +
                                                                    std::to_string(clock_) + " differ by more than the staleness bound",
                                                 digest()}));
    return;
  }
  if (cfg_.codec == PayloadCodec::TopK) return sparse_respond(from, msg, h);
  if (!streamed && !screen_model(from, robust_, theirs, range_of(h), h.exchange_id)) return;  // before we answer
  const double a = h.weight, b = my_weight();
  // y_s: the live parameters (the fragment's range), stable between steps; sent as it is copied.
  // The reply goes in the request's codec (codec auto: the initiator's choice; else ours).
  ExchangeMsg rh = our_exchange_header(h.exchange_id, b, h.fragment, h.codec);
  SentSnapshot mine;
  bool absolute = false;
  if (cfg_.codec == PayloadCodec::Int4) {
    // Our references of this pair must be the initiator's: else absolute int8 both ways, and
    // the references are set afresh from it (core/codec_refs.hpp).
    const std::uint64_t ours = int4_hash(from, h, false);
    absolute = h.ref_hash == 0 || ours == 0 || ours != h.ref_hash;
    rh.ref_hash = ours;
    rh.absolute = absolute;
    if (absolute) ++stats_.int4_absolute;
    int4_encode(from, rh, absolute, mine);
    env_.send(from, make_message(MsgType::ExchangeReply, rh, mine.chunks.front()));
  } else {
    mine = send_snapshot(from, MsgType::ExchangeReply, rh, false);
  }
  stats_.payload_bytes_sent += mine.bytes();
  ++stats_.payloads_sent;
  if (streamed) {
    // Keep y_s until x_s arrives (one streamed exchange per peer: a newer one replaces it, its
    // initiator having given the old one up).
    std::erase_if(in_, [&](const Incoming& x) { return x.peer == from; });
    Incoming inc{from, h.exchange_id, env_.now() + cfg_.exchange_timeout_s, a, b, std::move(mine)};
    inc.fragment = h.fragment;
    inc.codec = h.codec;
    inc.absolute = absolute;
    arm_deadline(kIncomingDeadline, inc.deadline, cfg_.exchange_timeout_s);
    in_.push_back(std::move(inc));
    return;
  }
  // and relative_distance(ys, theirs)
  outer_step(h.fragment);
  stats_.last_distance = mix_into_with_distance(range_of(h), Pieces(theirs), mine.view(), a / (a + b));
  responder_done(from, h.clock, h.fragment, h.codec);
}

ExchangeMsg Gossip::our_exchange_header(std::uint64_t exchange_id, double weight, std::uint32_t fragment, PayloadCodec codec) {
  ExchangeMsg h;
  h.fragment = fragment;
  h.fragments = fragments_;
  h.exchange_id = exchange_id;
  h.clock = clock_;
  h.weight = weight;
  h.codec = codec;
  h.param_count = params_.size();
  h.view = digest();
  return h;
}

void Gossip::responder_done(const PeerId& from, std::uint64_t their_clock, std::uint32_t fragment, PayloadCodec codec) {
  mixed_with(from, their_clock, fragment);
  ++stats_.answered;
  ProtocolEvent e = ev(ProtocolEvent::Kind::ExchangeDone, from, "responder");
  e.distance = stats_.last_distance;
  e.other = their_clock;
  e.codec = codec;
  env_.event(e);
}

void Gossip::on_exchange_payload(const PeerId& from, const Message& msg) {
  ExchangeMsg h;
  try {
    h = decode_exchange(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  auto it = std::find_if(in_.begin(), in_.end(), [&](const Incoming& x) { return x.peer == from && x.id == h.exchange_id; });
  // The x_s of a request we declined for its fragment count (on_exchange_request): not bad input.
  if (it == in_.end() && h.fragments != fragments_ && accepts_codec(h.codec) && h.param_count == params_.size()) return;
  // Checked whether or not we still wait for it: bad input is bad input. A chunk of x_s is
  // checked as it lands; a bad one, however late in x_s, drops the exchange (nothing mixed on
  // either side: no accept goes back).
  std::span<const float> theirs;
  std::string problem =
      h.codec == PayloadCodec::None ? check_chunk(msg, h, theirs) : decode_payload(msg, h, scratch_in_, theirs);
  if (problem.empty() && it != in_.end() && h.codec != it->codec)
    problem = std::string("x_s in codec ") + codec_name(h.codec) + ", the exchange's is " + codec_name(it->codec);
  // int4: a residual x_s for an exchange whose references we found apart (we replied absolute
  // int8): the initiator sends x_s again as int8 once it reads our reply; this one is of no use.
  if (problem.empty() && it != in_.end() && cfg_.codec == PayloadCodec::Int4 && it->absolute && !h.absolute &&
      h.fragment == it->fragment)
    return;
  if (problem.empty() && it != in_.end() && (h.fragment != it->fragment || h.absolute != it->absolute))
    problem = "x_s for fragment " + std::to_string(h.fragment) + (h.absolute ? " (absolute)" : "") + ", the exchange is of fragment " +
              std::to_string(it->fragment) + (it->absolute ? " (absolute)" : "");
  if (problem.empty() && it != in_.end() && cfg_.codec == PayloadCodec::Int4) {
    problem = int4_decode(from, msg, h, it->absolute, scratch_in_);
    theirs = scratch_in_;
  }
  if (!problem.empty()) {
    if (it != in_.end()) in_.erase(it);
    return reject(from, problem);
  }
  if (it == in_.end()) return;  // we answered Busy, or our deadline for it passed: nothing to mix
  if (leaving_) {
    // We replied before we left: our model is final now (evaluated, maybe handed over), so
    // we mix nothing, and say so rather than let the initiator wait for an accept until its
    // deadline. Without our accept it mixes nothing either.
    in_.erase(it);
    env_.send(from, make_message(ExchangeBusyMsg{h.exchange_id, "leaving", digest()}));
    return;
  }
  Pieces xs(theirs);
  if (h.codec == PayloadCodec::None) {
    if (!it->theirs.add(msg, h)) {
      // A chunk went missing (a message lost on the way): x_s cannot be whole.
      const std::string why =
          "responder: x_s chunk at offset " + std::to_string(h.offset) + ", expected " + std::to_string(it->theirs.floats);
      in_.erase(it);
      env_.event(ev(ProtocolEvent::Kind::ExchangeFailed, from, why));
      return;
    }
    if (it->theirs.floats < h.range_len()) return;  // more chunks to come
    xs = it->theirs.view();
    h = decode_exchange(it->theirs.chunks.front());  // its view
  }
  Incoming inc = std::move(*it);
  in_.erase(it);
  merge_view(h.view);
  heard_from(from);
  const Pieces ys = inc.mine.view();
  if (robust_.enabled()) {
    std::vector<float> whole_ys;
    std::span<const float> model = xs.contiguous(scratch_in_);
    if (!screen_model(from, robust_, model, ys.contiguous(whole_ys), h.exchange_id)) return;  // Busy: the initiator mixes nothing
    xs = Pieces(model);
  }
  // x_s is valid and will be mixed (nothing below can fail): the accept goes out first, so
  // that the initiator's mix overlaps ours instead of following it.
  ExchangeMsg r = our_exchange_header(h.exchange_id, inc.mine_weight, inc.fragment, inc.codec);
  env_.send(from, make_message(MsgType::ExchangeAccept, r, nullptr));
  outer_step(inc.fragment);
  stats_.last_distance = mix_into_with_distance(range_of(h), xs, ys, inc.weight / (inc.weight + inc.mine_weight));
  if (cfg_.codec == PayloadCodec::Int4) int4_commit(from, h, inc.mine.decoded, theirs);
  responder_done(from, h.clock, inc.fragment, inc.codec);
}

void Gossip::on_exchange_accept(const PeerId& from, const Message& msg) {
  ExchangeMsg h;
  try {
    h = decode_exchange(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  merge_view(h.view);
  heard_from(from);
  const std::size_t i = find_out(from, h.exchange_id);
  if (i == npos || !out_[i].streamed) return;  // late (our deadline passed), or not ours to accept
  out_[i].accepted = true;
  if (out_[i].reply_complete) complete_exchange(i);  // else the reply is still on its way
}

void Gossip::on_exchange_reply(const PeerId& from, const Message& msg) {
  ExchangeMsg h;
  try {
    h = decode_exchange(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  std::size_t i = find_out(from, h.exchange_id);
  // A reply in another codec than our request's: bad input (its chunks are not ours to add).
  if (i != npos && h.codec != out_[i].codec) {
    const std::string why = std::string("reply in codec ") + codec_name(h.codec) + " to a request in " + codec_name(out_[i].codec);
    out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(i));
    ++stats_.failed;
    return reject(from, why);
  }
  if (h.codec == PayloadCodec::None) {
    // Each chunk of y_s is checked as it lands; a bad one fails the exchange (nothing mixed).
    std::span<const float> chunk;
    if (auto p = check_chunk(msg, h, chunk); !p.empty()) {
      if (i != npos) {
        out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(i));
        ++stats_.failed;
      }
      return reject(from, p);
    }
    if (i == npos) {
      if (h.offset == 0) ++stats_.late_replies;  // its deadline passed: our side mixes nothing
      return;
    }
    if (h.fragment != out_[i].fragment) {
      out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(i));
      ++stats_.failed;
      return reject(from, "reply for fragment " + std::to_string(h.fragment) + " to an exchange of another");
    }
    ReceivedSnapshot& reply = out_[i].reply;
    if (h.offset < reply.floats) return;  // a chunk we hold already (a duplicate)
    if (!reply.add(msg, h))
      return fail_exchange(i, "reply chunk at offset " + std::to_string(h.offset) + ", expected " + std::to_string(reply.floats), false);
    if (reply.floats < h.range_len()) return;  // more chunks to come
  } else {
    if (i == npos) {
      std::span<const float> theirs;
      if (auto p = decode_payload(msg, h, scratch_in_, theirs); !p.empty()) return reject(from, p);
      ++stats_.late_replies;  // its deadline passed: our side mixes nothing
      return;
    }
    if (h.fragment != out_[i].fragment) {
      out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(i));
      ++stats_.failed;
      return reject(from, "reply for fragment " + std::to_string(h.fragment) + " to an exchange of another");
    }
    if (cfg_.codec == PayloadCodec::Int4) {
      if (out_[i].reply_complete) return;  // a duplicate
      return int4_reply(i, msg, h);       // decodes ŷ (and sends x_s again as int8 if told to)
    }
    out_[i].reply.chunks = {msg};
  }
  out_[i].reply_complete = true;
  // Streamed: mix only once the responder says it mixed our x_s; hold the reply until then.
  if (out_[i].streamed && !out_[i].accepted) return;
  complete_exchange(i);
}

void Gossip::complete_exchange(std::size_t index) {
  Outstanding o = std::move(out_[index]);
  out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(index));
  const PeerId from = o.peer;
  const Message& first = o.reply.chunks.front();
  const ExchangeMsg h = decode_exchange(first);  // decoded once already
  Pieces theirs;
  if (o.codec == PayloadCodec::None) {
    theirs = o.reply.view();  // checked as they landed
  } else if (cfg_.codec == PayloadCodec::Int4) {
    theirs = Pieces(std::span<const float>(o.reply_decoded));  // decoded against the references as it landed
  } else {
    std::span<const float> whole;
    if (auto p = decode_payload(first, h, scratch_in_, whole); !p.empty()) {
      ++stats_.failed;
      return reject(from, p);
    }
    theirs = Pieces(whole);
  }
  merge_view(h.view);
  heard_from(from);
  if (cfg_.codec == PayloadCodec::TopK) return sparse_finish(from, first, h, std::move(o));
  const Pieces xs = o.snap.view();
  const double a = o.weight, b = h.weight;
  if (robust_.enabled()) {
    std::vector<float> whole_xs;
    std::span<const float> model = theirs.contiguous(scratch_in_);
    if (!screen_model(from, robust_, model, xs.contiguous(whole_xs), std::nullopt)) {
      ++stats_.failed;
      return;
    }
    theirs = Pieces(model);
  }
  outer_step(o.fragment);
  stats_.last_distance = mix_into_with_distance(range_of(h), theirs, xs, b / (a + b));  // and relative_distance(xs, theirs)
  if (cfg_.codec == PayloadCodec::Int4) int4_commit(from, h, o.snap.decoded, o.reply_decoded);
  mixed_with(from, h.clock, o.fragment);
  ++stats_.exchanges;
  if (cfg_.codec == PayloadCodec::Auto && settling_codec() && o.codec != PayloadCodec::None) ++stats_.settle_compressed;
  ProtocolEvent e = ev(ProtocolEvent::Kind::ExchangeDone, from, "initiator");
  e.distance = stats_.last_distance;
  e.seconds = env_.now() - o.started;
  e.other = h.clock;
  e.codec = o.codec;
  note_round_trip(e.seconds, o.codec, from);
  env_.event(e);
}

void Gossip::on_busy(const PeerId& from, const Message& msg) {
  ExchangeBusyMsg h;
  try {
    h = decode_busy(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  merge_view(h.view);
  heard_from(from);
  if (auto i = find_out(from, h.exchange_id); i != npos) {
    const auto says = [&](const char* prefix) { return h.reason.rfind(prefix, 0) == 0; };
    if (says("stale")) ++stats_.stale;
    // The reasons on_exchange_request gives for a refusal that is part of the protocol.
    if (says("crossing exchange") || says("joining") || says("leaving") || says("stale"))
      decline_exchange(i, h.reason);
    else
      fail_exchange(i, "refused: " + h.reason, true);
  }
}

bool Gossip::screen_model(const PeerId& from, RobustMix& robust, std::span<const float>& model,
                          std::span<const float> ours, std::optional<std::uint64_t> busy_id) {
  if (!robust.enabled()) return true;
  RobustMix::Verdict v;
  const std::span<const float> out = robust.screen(from, model, ours, robust_scratch_, v);
  if (Member* m = view_.find(from)) m->screened = v.action != RobustMix::Action::Accept;
  if (v.action == RobustMix::Action::Accept) return true;
  if (v.action == RobustMix::Action::Clip) {
    ++stats_.robust_clipped;
    model = out;
    return true;
  }
  // Reported for the 1st, 2nd, 4th, 8th... refusal, so that a flood does not flood the log too
  // (the count is in the stats either way).
  const std::uint64_t n = ++stats_.robust_refused;
  if ((n & (n - 1)) == 0) {
    std::ostringstream why;
    why.precision(4);
    why << "robust mixing: model at distance " << v.distance << " from ours, " << v.distance / v.typical
        << " times the typical " << v.typical << ": refused, nothing mixed (" << n << " refused so far)";
    env_.event(ev(ProtocolEvent::Kind::Rejected, from, why.str()));
  }
  if (busy_id) env_.send(from, make_message(ExchangeBusyMsg{*busy_id, "refused: model too far from ours (robust mixing)", digest()}));
  return false;
}

bool Gossip::screen_values(const PeerId& from, RobustMix& robust, std::vector<float>& values,
                           std::span<const float> ours, std::optional<std::uint64_t> busy_id) {
  std::span<const float> model = values;
  if (!screen_model(from, robust, model, ours, busy_id)) return false;
  if (model.data() != values.data()) std::copy(model.begin(), model.end(), values.begin());
  return true;
}

void Gossip::heard_from(const PeerId& peer) {
  if (Member* m = view_.find(peer)) {
    m->last_heard = env_.now();
    m->failures = 0;
    m->skip_until = 0;
  }
}

}  // namespace rumor
