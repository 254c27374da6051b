// Gossip: the push-pull exchange handlers (request, reply, busy). See gossip.hpp, steps 2-4.
#include "core/gossip.hpp"
#include "core/mix.hpp"
#include "core/serial.hpp"

namespace rumor {

namespace {
constexpr std::size_t npos = static_cast<std::size_t>(-1);
// Checks an exchange payload; returns the reason it is unusable, or empty.
std::string payload_problem(const Message& msg, const ExchangeMsg& h, std::size_t ours,
                            std::span<const float>& out) {
  if (h.param_count != ours)
    return "model has " + std::to_string(h.param_count) + " parameters, ours " + std::to_string(ours);
  try {
    out = payload_floats(msg, h.param_count);
  } catch (const DecodeError& e) {
    return e.what();
  }
  if (!all_finite(out)) return "non-finite parameters (NaN or Inf) in the payload";
  if (!(h.weight > 0) || !std::isfinite(h.weight)) return "bad mixing weight";
  return {};
}
}  // namespace

void Gossip::on_exchange_request(const PeerId& from, const Message& msg) {
  ExchangeMsg h;
  try {
    h = decode_exchange(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  std::span<const float> theirs;
  if (auto p = payload_problem(msg, h, params_.size(), theirs); !p.empty()) return reject(from, p);
  merge_view(h.view);
  heard_from(from);
  // Crossing exchanges between the same pair: the smaller id's request wins.
  if (find_out(from) != npos && view_.self().id < from) {
    ExchangeBusyMsg b{h.exchange_id, "crossing exchange: answer mine instead", digest()};
    env_.send(from, make_message(b));
    return;
  }
  const double a = h.weight, b = my_weight();
  auto mine = encode_params(params_);  // y_s: the live parameters, stable between steps
  ExchangeMsg r;
  r.exchange_id = h.exchange_id;
  r.clock = clock_;
  r.weight = b;
  r.param_count = params_.size();
  r.view = digest();
  env_.send(from, make_message(MsgType::ExchangeReply, r, mine));
  const std::span<const float> ys(reinterpret_cast<const float*>(mine->data()), params_.size());
  stats_.last_distance = relative_distance(ys, theirs);
  mix_into(params_, theirs, ys, a / (a + b));
  ++stats_.answered;
  ProtocolEvent e = ev(ProtocolEvent::Kind::ExchangeDone, from, "responder");
  e.distance = stats_.last_distance;
  e.other = h.clock;
  env_.event(e);
}

void Gossip::on_exchange_reply(const PeerId& from, const Message& msg) {
  ExchangeMsg h;
  try {
    h = decode_exchange(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  std::span<const float> theirs;
  if (auto p = payload_problem(msg, h, params_.size(), theirs); !p.empty()) {
    if (auto i = find_out(from, h.exchange_id); i != npos) out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(i));
    ++stats_.failed;
    return reject(from, p);
  }
  merge_view(h.view);
  heard_from(from);
  const std::size_t i = find_out(from, h.exchange_id);
  if (i == npos) {
    ++stats_.late_replies;  // its deadline passed: our side mixes nothing
    return;
  }
  const Outstanding o = std::move(out_[i]);
  out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(i));
  const std::span<const float> xs(reinterpret_cast<const float*>(o.snapshot->data()), params_.size());
  const double a = o.weight, b = h.weight;
  stats_.last_distance = relative_distance(xs, theirs);
  mix_into(params_, theirs, xs, b / (a + b));
  ++stats_.exchanges;
  ProtocolEvent e = ev(ProtocolEvent::Kind::ExchangeDone, from, "initiator");
  e.distance = stats_.last_distance;
  e.seconds = env_.now() - o.started;
  e.other = h.clock;
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
  if (auto i = find_out(from, h.exchange_id); i != npos) fail_exchange(i, "busy: " + h.reason, true);
}

void Gossip::heard_from(const PeerId& peer) {
  if (Member* m = view_.find(peer)) {
    m->last_heard = env_.now();
    m->failures = 0;
    m->skip_until = 0;
  }
}

}  // namespace rumor
