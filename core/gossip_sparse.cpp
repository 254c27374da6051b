// Gossip: the topk codec (core/sparse.hpp has the scheme). An exchange averages the chosen
// coordinates S exactly, with the same weights and overlap rule as a dense exchange.
#include "core/gossip.hpp"
#include "core/mix.hpp"
#include "core/serial.hpp"
#include "core/sparse.hpp"

namespace rumor {

std::shared_ptr<const Bytes> Gossip::sparse_request(std::vector<std::uint32_t>& idx) {
  if (sparse_ref_.size() != params_.size()) sparse_ref_.assign(params_.size(), 0.0f);
  idx = select_coordinates(params_, sparse_ref_, topk_k(params_.size(), cfg_.topk_fraction), sparse_cursor_);
  return std::make_shared<Bytes>(encode_sparse_request(idx, params_));
}

void Gossip::sparse_respond(const PeerId& from, const Message& msg, const ExchangeMsg& h) {
  SparseSelection sel;
  try {
    sel = decode_sparse_request(*msg.payload, params_.size());
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  if (robust_sparse_.enabled()) {
    std::vector<float> ours(sel.indices.size());
    for (std::size_t i = 0; i < ours.size(); ++i) ours[i] = params_[sel.indices[i]];
    if (!screen_values(from, robust_sparse_, sel.values, ours, h.exchange_id)) return;
  }
  outer_step();  // before y_s[S] is taken: the reply and our mix see the same model
  const double a = h.weight, b = my_weight();
  ExchangeMsg r = our_exchange_header(h.exchange_id, b, 0, PayloadCodec::TopK);
  auto reply = std::make_shared<Bytes>(encode_sparse_reply(sel.indices, params_));
  stats_.payload_bytes_sent += reply->size();
  ++stats_.payloads_sent;
  env_.send(from, make_message(MsgType::ExchangeReply, r, reply));
  if (sparse_ref_.size() != params_.size()) sparse_ref_.assign(params_.size(), 0.0f);
  const float w = static_cast<float>(a / (a + b));
  double d = 0, nx = 0;
  for (std::size_t i = 0; i < sel.indices.size(); ++i) {
    const auto j = sel.indices[i];
    const float diff = sel.values[i] - params_[j];
    d += double(diff) * diff;
    nx += double(params_[j]) * params_[j];
    params_[j] += w * diff;
    sparse_ref_[j] = params_[j];
  }
  stats_.last_distance = nx > 0 ? std::sqrt(d / nx) : 0.0;
  responder_done(from, h.clock, 0, PayloadCodec::TopK);
}

void Gossip::sparse_finish(const PeerId& from, const Message& msg, const ExchangeMsg& h, Outstanding o) {
  std::vector<float> theirs;
  SparseSelection mine;
  try {
    theirs = decode_sparse_reply(*msg.payload, o.sparse_idx.size());
    mine = decode_sparse_request(*o.snap.chunks.at(0), params_.size());  // x_s[S] as we sent it
  } catch (const DecodeError& e) {
    ++stats_.failed;
    return reject(from, e.what());
  }
  if (!screen_values(from, robust_sparse_, theirs, mine.values, std::nullopt)) {
    ++stats_.failed;
    return;
  }
  outer_step();
  const double a = o.weight, b = h.weight;
  const float w = static_cast<float>(b / (a + b));
  double d = 0, nx = 0;
  for (std::size_t i = 0; i < o.sparse_idx.size(); ++i) {
    const auto j = o.sparse_idx[i];
    const float diff = theirs[i] - mine.values[i];
    d += double(diff) * diff;
    nx += double(mine.values[i]) * mine.values[i];
    params_[j] += w * diff;
    sparse_ref_[j] = params_[j];
  }
  stats_.last_distance = nx > 0 ? std::sqrt(d / nx) : 0.0;
  mixed_with(from, h.clock);
  ++stats_.exchanges;
  ProtocolEvent e = ev(ProtocolEvent::Kind::ExchangeDone, from, "initiator");
  e.distance = stats_.last_distance;
  e.seconds = env_.now() - o.started;
  e.other = h.clock;
  e.codec = PayloadCodec::TopK;
  note_round_trip(e.seconds, PayloadCodec::TopK, from);
  env_.event(e);
}

}  // namespace rumor
