// Inputs of simulated peers: the network hand-over (send, deliver, refusals), inboxes held
// during steps, and protocol events turned into events.csv rows and totals.
#include "sim/simulation_impl.hpp"
#include "sim/output.hpp"
#include "core/protocol_messages.hpp"
#include "core/serial.hpp"

namespace rumor::sim {

namespace {
// The share of a whole snapshot a payload message carries: 1, except for one chunk of an
// exchange's snapshot sent in several (GossipConfig::exchange_chunk_bytes), so that a class's
// exchange_cpu is charged once per snapshot however it is cut.
double payload_share(const Message& m) {
  if (!m.payload) return 0;
  // Payloads under the smallest chunk are not decoded (the simulator's models are mostly
  // small): only a model's last chunk can be that small, and it is then charged in full.
  const bool may_be_chunk = m.payload->size() >= kMinExchangeChunk * sizeof(float);
  if (may_be_chunk && (m.type == MsgType::ExchangeRequest || m.type == MsgType::ExchangeReply || m.type == MsgType::ExchangePayload)) {
    try {
      const ExchangeMsg h = decode_exchange(m);
      if (h.chunk_floats() < h.param_count) return static_cast<double>(h.floats_here()) / static_cast<double>(h.param_count);
    } catch (const DecodeError&) {
    }
  }
  return 1;
}
}  // namespace

// ---------------------------------------------------------------- message faults

// One draw per point, in a fixed order. Truncate and corrupt change a copy of the payload (the
// sender's snapshot is shared) or, without one, the header; the receiver must refuse what it
// cannot read and never mix a non-finite value.
bool Simulation::Impl::message_faults(std::uint32_t, std::uint32_t, Message& msg, double& at, bool& duplicate) {
  const FaultSettings& fs = s.faults;
  if (fire(FaultPoint::Drop)) return false;
  if (fire(FaultPoint::Delay)) at += fault_rng.uniform(0, fs.delay_max);
  if (fire(FaultPoint::Reorder)) at += fs.reorder_delay;  // a later message on the link overtakes it
  if (fire(FaultPoint::Truncate)) {
    if (msg.payload && !msg.payload->empty()) {
      auto cut = std::make_shared<Bytes>(msg.payload->begin(), msg.payload->begin() + static_cast<std::ptrdiff_t>(fault_rng.below(msg.payload->size())));
      msg.payload = std::move(cut);
    } else {
      msg.header.resize(fault_rng.below(msg.header.size() + 1));
    }
    msg.payload_digest.reset();
    msg.payload_finite.reset();
  }
  if (msg.payload && msg.payload->size() >= 4 && fire(FaultPoint::Corrupt)) {
    {
      // A word of the payload turns into a NaN (what a bit flip in an exponent can give).
      auto bad = std::make_shared<Bytes>(*msg.payload);
      const std::size_t w = fault_rng.below(bad->size() / 4);
      for (int k = 0; k < 4; ++k) (*bad)[4 * w + static_cast<std::size_t>(k)] = 0xff;
      msg.payload = std::move(bad);
    }
    msg.payload_digest.reset();
    msg.payload_finite.reset();
  }
  duplicate = fire(FaultPoint::Duplicate);
  return true;
}

// ---------------------------------------------------------------- inputs

void Simulation::Impl::offer(Peer& p, Input in) {
  if (p.busy) {
    in.t = now;
    p.inbox.push_back(in);
    return;
  }
  handle(p, in);
  if (p.busy || !p.running()) return;
  if (p.waiting) act(p);
}

void Simulation::Impl::handle(Peer& p, const Input& in) {
  switch (in.kind) {
    case Input::Kind::Message: {
      // Move the message out first: the handler sends, which may grow the slab.
      const std::uint32_t from = slots[in.arg].from;
      const Message m = std::move(slots[in.arg].msg);
      free_slot(in.arg);
      p.charge_exchange_cpu(payload_share(m) * s.classes[p.cls].exchange_cpu);
      p.gossip()->on_message(peers[from].id, m);
      break;
    }
    case Input::Kind::Timer:
      p.gossip()->on_timer(in.arg);
      break;
    case Input::Kind::SendFailed:
      p.gossip()->on_send_failed(peers[in.other].id, "connection refused");
      break;
  }
}

void Simulation::Impl::drain(Peer& p) {
  // By index: handling an input may insert one (a timer already due, SimEnv::set_timer) or
  // end the peer's life (its inbox is then released).
  p.draining = true;
  for (p.drain_next = 0; p.drain_next < p.inbox.size();) {
    const Input in = p.inbox[p.drain_next++];
    handle(p, in);
  }
  p.inbox.clear();  // keeps its capacity: it refills without allocating
  p.draining = false;
}

void Simulation::Impl::release_inbox(Peer& p) {
  for (const Input& in : p.inbox)
    if (in.kind == Input::Kind::Message) free_slot(in.arg);
  p.inbox.clear();
  p.inbox.shrink_to_fit();
}

std::uint32_t Simulation::Impl::put_slot(Slot&& sl) {
  if (free_slots.empty()) {
    slots.push_back(std::move(sl));
    return static_cast<std::uint32_t>(slots.size() - 1);
  }
  const std::uint32_t i = free_slots.back();
  free_slots.pop_back();
  slots[i] = std::move(sl);
  return i;
}

void Simulation::Impl::free_slot(std::uint64_t i) {
  slots[i].msg = Message{};
  free_slots.push_back(static_cast<std::uint32_t>(i));
}

void Simulation::Impl::send(std::uint32_t from, const PeerId& to_id, Message msg) {
  Peer& f = peers[from];
  ++totals.messages;
  const std::int64_t to = peer_index(to_id);
  if (checker && to >= 0 && to < static_cast<std::int64_t>(peers.size())) checker->on_send(*owner, from, static_cast<std::uint32_t>(to), msg);
  if (to < 0 || to >= static_cast<std::int64_t>(peers.size()) || to == from) {
    ++totals.dropped;  // no such address: nobody answers
    return;
  }
  Peer& t = peers[static_cast<std::size_t>(to)];
  const auto ti = static_cast<std::uint32_t>(to);
  // faults.crash_mid_*: the sender vanishes right after this send (an event at this time).
  if (s.faults.any()) {
    const MsgType ty = msg.type;
    FaultPoint crash = FaultPoint::Count;
    if (ty == MsgType::ExchangeRequest || ty == MsgType::ExchangeReply || ty == MsgType::ExchangePayload ||
        ty == MsgType::ExchangeAccept)
      crash = FaultPoint::CrashMidExchange;
    else if (ty == MsgType::StateRequest || ty == MsgType::StateChunk)
      crash = FaultPoint::CrashMidTransfer;
    else if (ty == MsgType::Leave || ty == MsgType::LeaveAck)
      crash = FaultPoint::CrashMidLeave;
    if (crash != FaultPoint::Count && fire(crash))
      schedule(now, EventKind::Fault, from, f.life, kFaultCrash | (static_cast<std::uint64_t>(crash) << 8));
  }
  if (!t.running() || fire(FaultPoint::ConnectFail)) {
    // Nothing listens there (not started yet, exited, crashed), or faults.connect_fail: the
    // connect is refused.
    ++totals.refused;
    schedule(std::max(now + net->refused_after(from, ti), net->last_arrival(ti, from)), EventKind::SendFailed, from, f.life, ti);
    return;
  }
  if (net->partitioned(from, ti, now) || fault_partitioned(from, ti)) {
    ++totals.dropped;
    return;
  }
  const std::uint64_t bytes = 32 + msg.header.size() + msg.payload_size();
  f.bytes_sent += bytes;
  totals.bytes += bytes;
  // A payload's CPU at both ends (compute.exchange_cpu: the snapshot copy and frame hash on
  // the way out, the hash check, finiteness, distance and mix on the way in) is charged to
  // each peer's compute time, and it also lies on the message's path: the bytes leave after
  // the sender's share and the model is mixed after the receiver's, each stretched by the
  // shared cores. Without the path, exchanges completed about twice as often per step as a
  // real quickstart's (docs/sim.md, "Calibration").
  const double share = payload_share(msg);
  f.charge_exchange_cpu(share * s.classes[f.cls].exchange_cpu);
  const double path = share * (s.classes[f.cls].exchange_cpu + s.classes[t.cls].exchange_cpu) * cpu_factor();
  double at = net->transmit(from, ti, bytes, now, path);
  if (at < 0) {
    ++totals.dropped;
    return;
  }
  bool duplicate = false;
  if (s.faults.any() && !message_faults(from, ti, msg, at, duplicate)) {
    ++totals.dropped;
    return;
  }
  Slot sl;
  sl.msg = std::move(msg);
  sl.from = from;
  sl.to = ti;
  sl.from_life = f.life;
  sl.to_life = t.life;
  sl.bytes = bytes;
  if (duplicate) schedule(at, EventKind::Deliver, ti, t.life, put_slot(Slot(sl)));  // the copy first, as before
  schedule(at, EventKind::Deliver, ti, t.life, put_slot(std::move(sl)));
}

void Simulation::Impl::deliver(const Event& e) {
  Peer& t = peers[e.peer];
  const Slot& sl = slots[e.arg];
  const std::uint32_t from = sl.from, from_life = sl.from_life;
  if (net->partitioned(from, e.peer, now) || fault_partitioned(from, e.peer)) {
    ++totals.dropped;
    free_slot(e.arg);
    return;
  }
  if (!t.running() || t.life != sl.to_life) {
    // It died while the message was on its way: the connection is reset.
    ++totals.refused;
    free_slot(e.arg);
    schedule(std::max(now + net->latency(e.peer, from), net->last_arrival(e.peer, from)), EventKind::SendFailed, from, from_life,
             e.peer);
    return;
  }
  t.bytes_recv += sl.bytes;
  offer(t, {Input::Kind::Message, from, e.arg});
}

void Simulation::Impl::protocol_event(std::uint32_t peer, const ProtocolEvent& e) {
  using K = ProtocolEvent::Kind;
  const Peer& p = peers[peer];
  switch (e.kind) {
    case K::ExchangeDone:
      if (e.reason == "initiator") ++totals.exchanges; else ++totals.answered;
      // Test-only: a NaN slips into the model as if the mix had let it through.
      if (s.faults.mutation == Mutation::MixNonfinite && p.model && !p.model->params().empty() && fault_rng.uniform() < 0.05)
        p.model->params()[0] = std::numeric_limits<float>::quiet_NaN();
      if (s.log_exchanges)
        log(p, "exchange", e.peer, e.clock, e.distance,
            fmt::format("{} rtt={:.6f} peer_clock={}{}", e.reason, e.seconds, e.other,
                        s.loop.gossip.codec == PayloadCodec::Auto ? std::string(" codec=") + codec_name(e.codec) : std::string()));
      break;
    case K::ExchangeFailed:
      ++totals.failed;
      log(p, "exchange_failed", e.peer, e.clock, 0, e.reason);
      break;
    case K::ExchangeDeclined:
      ++totals.declined;
      if (s.log_exchanges) log(p, "exchange_declined", e.peer, e.clock, 0, e.reason);
      break;
    case K::Rejected:
      ++totals.rejected;
      log(p, "rejected", e.peer, e.clock, 0, e.reason);
      break;
    case K::Joined: log(p, "joined", e.peer, e.clock, 0, ""); break;
    case K::Join:
      if (s.log_views) log(p, "view_join", e.peer, e.clock, 0, "");
      break;
    case K::Leave: log(p, "view_leave", e.peer, e.clock, 0, ""); break;
    case K::Dead: log(p, "view_dead", e.peer, e.clock, 0, ""); break;
    case K::Suspect: log(p, "view_suspect", e.peer, e.clock, 0, ""); break;
    case K::Wait: log(p, "wait", e.peer, e.clock, e.seconds, fmt::format("slowest={}", e.other)); break;
    case K::StateReceived: log(p, "state_received", e.peer, e.other, 0, e.reason); break;
    case K::StateFailed: log(p, "state_failed", e.peer, e.clock, 0, e.reason); break;
    case K::Handover: log(p, "handover", e.peer, e.other, e.distance, e.reason); break;
    case K::JoinFailed: log(p, "join_failed", "", e.clock, e.seconds, e.reason); break;
    case K::Founded: log(p, "founded", "", e.clock, e.seconds, ""); break;
    case K::PeersInView: log(p, "peers_in_view", "", e.clock, static_cast<double>(e.other), e.reason); break;
    case K::Training:
      if (!e.reason.empty()) log(p, "state_wait_over", "", e.clock, e.seconds, "no model from the swarm (" + e.reason + "): training from our own initialisation");
      break;
    case K::Diverged: log(p, "diverged", "", e.clock, std::stod(e.reason), "training diverged (loss not finite): lower workload.lr"); break;
    case K::Settled: log(p, "settled", "", e.clock, e.distance, fmt::format("exchanges={} seconds={:.6f}", e.other, e.seconds)); break;
    case K::Departed: log(p, "departed", "", e.clock, e.seconds, e.reason); break;
  }
}

}  // namespace rumor::sim
