// Gossip: lifecycle, scheduling of exchanges, timers and their dispatch, message dispatch,
// and the exchange-failure half of failure detection (note_failure: failed exchanges in a row
// -> Suspect; the Suspect -> Dead check). The SWIM probes (Ping, PingReq, their timers) live
// in gossip_membership.cpp with state transfer and leave; the other message handlers in
// gossip_exchange.cpp, gossip_sparse.cpp and gossip_join.cpp (join, Ping answers, views).
#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/check.hpp"
#include "core/gossip.hpp"
#include "core/hash.hpp"
#include "core/mix.hpp"

namespace rumor {

namespace {
constexpr std::size_t npos = static_cast<std::size_t>(-1);
}

const char* event_kind_name(ProtocolEvent::Kind k) {
  using K = ProtocolEvent::Kind;
  switch (k) {
    case K::ExchangeDone: return "exchange";
    case K::ExchangeFailed: return "exchange_failed";
    case K::ExchangeDeclined: return "exchange_declined";
    case K::Rejected: return "rejected";
    case K::Join: return "join";
    case K::Leave: return "leave";
    case K::Dead: return "dead";
    case K::Suspect: return "suspect";
    case K::Joined: return "joined";
    case K::Wait: return "wait";
    case K::StateReceived: return "state_received";
    case K::StateFailed: return "state_failed";
    case K::Handover: return "handover";
    case K::JoinFailed: return "join_failed";
    case K::Founded: return "founded";
    case K::PeersInView: return "peers_in_view";
    case K::Training: return "training";
    case K::Diverged: return "diverged";
    case K::Settled: return "settled";
    case K::Departed: return "departed";
  }
  return "?";
}

Gossip::Gossip(Env& env, GossipConfig cfg, MemberDigest self, std::string fingerprint, std::span<float> params)
    : env_(env), cfg_(cfg), view_(std::move(self)), fingerprint_(std::move(fingerprint)), params_(params) {
  RUMOR_CHECK(cfg_.exchange_share > 0);
  RUMOR_CHECK(cfg_.exchange_timeout_s > 0);
  RUMOR_CHECK(cfg_.max_in_flight >= 1 && cfg_.max_in_flight <= 2);
  RUMOR_CHECK(cfg_.staleness >= 0);
  RUMOR_CHECK(cfg_.topk_fraction > 0 && cfg_.topk_fraction <= 1);
  RUMOR_CHECK(cfg_.outer.lr > 0 && cfg_.outer.momentum >= 0 && cfg_.outer.momentum < 1);
  RUMOR_CHECK(cfg_.join_timeout_s > 0 && cfg_.join_retry_s > 0);
  RUMOR_CHECK(cfg_.fragments >= 1 && cfg_.fragments <= kMaxFragments);
  RUMOR_CHECK(cfg_.int4_partners >= 1);
  RUMOR_CHECK(cfg_.fragments == 1 || cfg_.codec != PayloadCodec::TopK, "topk does not combine with fragments > 1");
  fragments_ = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(cfg_.fragments, 1, std::max<std::size_t>(params_.size(), 1)));
}

ProtocolEvent Gossip::ev(ProtocolEvent::Kind k, const PeerId& peer, std::string reason) const {
  ProtocolEvent e{k, peer, std::move(reason)};
  e.clock = clock_;
  return e;
}

void Gossip::start(const std::vector<PeerId>& seeds) {
  seeds_.clear();
  self_seeded_ = false;
  for (const auto& s : seeds) {
    if (s == view_.self().id) self_seeded_ = true;
    else if (std::find(seeds_.begin(), seeds_.end(), s) == seeds_.end()) seeds_.push_back(s);
  }
  joined_ = seeds_.empty();
  state_ready_ = joined_ || !cfg_.fetch_state;
  if (!joined_) {
    send_join_requests();
    join_retry_gap_ = std::min(GossipConfig::kJoinRetryFirst, cfg_.join_retry_s);
    env_.set_timer(join_retry_gap_, timer_id(kJoinRetry, ++timer_seq_));
    if (std::isfinite(cfg_.join_timeout_s)) env_.set_timer(cfg_.join_timeout_s, timer_id(kJoinDeadline, ++timer_seq_));
  }
  env_.set_timer(cfg_.probe_interval_s, timer_id(kProbe, ++timer_seq_));
  if (cfg_.view == ViewMode::Partial) go_partial(0);
}

double Gossip::my_weight() const {
  return cfg_.mix_weight == MixWeight::Samples ? static_cast<double>(std::max<std::uint64_t>(samples_, 1)) : 1.0;
}

void Gossip::resume_clock(std::uint64_t clock, std::uint64_t samples) {
  clock_ = clock;
  samples_ = samples;
  view_.self().clock = clock;
  view_.self().samples = samples;
}

void Gossip::on_step_done(std::uint64_t clock, std::uint64_t samples) {
  clock_ = clock;
  samples_ = samples;
  view_.self().clock = clock;
  view_.self().samples = samples;
  ++model_version_;
  ++steps_since_exchange_;
  if (auto_timing()) {
    // Auto: the wall time per step over the last few seconds (kStepTau), every gap between
    // steps counted but a pause: one of 20 steps or more and over kPauseGap (a Python script's
    // serve(), a wait for state). A CPU cap's throttled part of each period is the peer's pace
    // and counts: an earlier rule that dropped any gap of 20 steps took a testbed peer at 0.3
    // of a core, stepping 1 ms steps for 30 ms of each 100, for a 1 ms step, and set H 3.3
    // times what exchange_share asks (docs/ARCHITECTURE.md "Local steps chosen by the peer").
    const double now = env_.now();
    bool counted = false;
    if (last_step_at_ >= 0) {
      const double dt = now - last_step_at_, est = step_seconds();
      if (!(est > 0) || dt < std::max(20 * est, kPauseGap)) {
        const double decay = std::exp(-dt / kStepTau);
        step_time_sum_ = step_time_sum_ * decay + dt;
        step_count_sum_ = step_count_sum_ * decay + 1;
        cpu_sum_ *= decay;
        protocol_cpu_sum_ *= decay;
        handled_sum_ *= decay;
        counted = true;
      }
    }
    last_step_at_ = now;
    // The CPU clocks (exchange_cpu_seconds) at most every kCpuRead seconds, and after a pause
    // (whose CPU, an evaluation's say, is left out): reading a process's CPU clock makes the
    // kernel account its running thread at once, and under a CFS quota throttles it there.
    if (!counted || now - cpu_read_at_ >= kCpuRead) {
      const CpuClocks cpu = env_.cpu();
      const std::uint64_t handled = stats_.exchanges + stats_.answered;
      if (counted && cpu.total >= 0 && last_cpu_total_ >= 0) {
        cpu_sum_ += std::max(0.0, cpu.total - last_cpu_total_);
        protocol_cpu_sum_ += std::max(0.0, cpu.protocol - last_cpu_protocol_);
        handled_sum_ += static_cast<double>(handled - last_handled_);
      }
      last_cpu_total_ = cpu.total;
      last_cpu_protocol_ = cpu.protocol;
      last_handled_ = handled;
      cpu_read_at_ = now;
    }
  }
  if (steps_since_exchange_ >= local_steps_now() && out_.size() < cfg_.max_in_flight && state_ready_ && !leaving_)
    start_exchange();
}

double Gossip::compute_seconds() const {
  const double s = step_seconds();
  if (!(cpu_sum_ > 0)) return s;
  return s * (1 - std::clamp(protocol_cpu_sum_ / cpu_sum_, 0.0, 0.9));
}

double Gossip::exchange_cpu_seconds() const {
  if (!(cpu_sum_ > 0) || !(handled_sum_ >= 2) || !(step_time_sum_ > 0)) return 0;
  const double per_wall_second = cpu_sum_ / step_time_sum_;
  return protocol_cpu_sum_ / handled_sum_ / per_wall_second;
}

double Gossip::RttWindow::min() const {
  return *std::min_element(rtt.begin(), rtt.begin() + static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(count, rtt.size())));
}

// --codec auto: the same H for each codec of kAutoCodecs, from its own window while that is
// fresh, else from this exchange's codec's round trip scaled by the bytes (all of it taken as
// the link's: hopeful for a codec with fewer bytes, which its first exchange then measures,
// and wary of one with more, which is retried as if the link's cost were its latency every
// kRetryFirst to kRetryMax round trips: CodecLinks). The lightest codec whose H is within kCodecSlack of the least goes next (the least
// quantisation for about the same mixing). With a fixed H: the lightest whose H fits in it,
// else as auto does. Chosen twice: from all our round trips (H, and the windows a new partner
// borrows), and from those with this partner alone (the codec of our next exchange with
// it): on S4 of the testbed, three peers on 1 Gbit chose float32 from all theirs, and sent
// float32 to the fourth on 10 Mbit as well (docs/testbed.md "`--codec auto`").
double Gossip::choose_codec(CodecLinks& l, PayloadCodec codec, double budget) const {
  const auto steps_for = [&](double rtt) { return std::max(1.0, std::ceil(rtt / budget)); };
  const std::size_t n = params_.size() / fragments_ + 1;  // a fragment's parameters: only the ratios count
  const std::size_t cur = auto_codec_slot(codec);
  const double rtt = l.windows[cur].min(), here = rtt / static_cast<double>(encoded_size(codec, n));
  const bool retry = l.count >= l.retry_at;
  std::array<double, std::size(kAutoCodecs)> est{}, hk{};  // round trip and H of each codec
  for (std::size_t k = 0; k < hk.size(); ++k) {  // kAutoCodecs: most bytes first
    const RttWindow& wk = l.windows[k];
    const bool fresh = l.fresh(k);
    const double scaled = here * static_cast<double>(encoded_size(kAutoCodecs[k], n));
    // A lighter codec measured once only, and slower than this one, queued behind the others'
    // payloads on a shared link (as first exchanges do): fewer bytes are not slower on the
    // link itself, so it may try again.
    est[k] = !fresh                                      ? (retry && k < cur ? rtt : scaled)
             : k > cur && wk.count == 1 && wk.min() > rtt ? scaled
                                                          : wk.min();
    hk[k] = steps_for(est[k]);
  }
  // A fixed H: what fits in it; auto: within kCodecSlack of the least (round trips jitter by
  // a few percent, and a link whose cost is its latency gains nothing from fewer bytes).
  const double least = *std::min_element(hk.begin(), hk.end());
  const double limit = cfg_.local_steps && static_cast<double>(cfg_.local_steps) >= least ? static_cast<double>(cfg_.local_steps)
                                                                                          : least * kCodecSlack;
  std::size_t pick = 0;
  while (hk[pick] > limit) ++pick;
  if (l.retrying) {  // this round trip was a retry's: did the heavier codec keep its place?
    // If not, back to the codec before the retry: a codec between the two is not tried on a
    // hopeful estimate (its bytes scaled from the heavier one), which early round trips that
    // queued behind the others' first exchanges make look as good as the lighter one.
    const bool kept = pick <= cur;
    if (!kept) pick = std::max<std::size_t>(pick, l.retry_from);
    l.retry_gap = kept ? kRetryFirst : std::min(2 * l.retry_gap, kRetryMax);
    l.retrying = false;
    l.retry_at = l.count + l.retry_gap;
  } else if (retry) {
    l.retrying = pick < cur;
    l.retry_from = static_cast<std::uint8_t>(cur);
    if (!l.retrying) l.retry_at = l.count + l.retry_gap;
  }
  l.codec = kAutoCodecs[pick];
  // Settling: the most exact codec whose round trip is within kSettleSlack of this one's. A
  // link whose cost is latency or the partner's CPU settles in float32; one whose cost is its
  // bytes keeps what it chose until the models are within kSettleExactDistance (codec_for), or
  // the settle has no time for the exchanges that bring them together: on the testbed's S4,
  // float32 settling over the 10 Mbit link took 3.9 s for 4 exchanges and left that peer at a
  // distance of 0.15, 4 points below the others.
  std::size_t settle = 0;
  while (settle < pick && est[settle] > kSettleSlack * est[pick]) ++settle;
  l.settle_codec = kAutoCodecs[settle];
  l.chosen = true;
  return hk[pick];
}

namespace {
// Adds a round trip to a window; its `count` (the round trips it was counted among) is then
// `count`. A window not added to in `fresh` of them, or borrowed, starts afresh.
template <class Window>
void add_round_trip(Window& w, std::uint64_t count, std::uint64_t fresh, double seconds) {
  if (w.borrowed || (w.count > 0 && count - w.last > fresh)) w.count = 0;
  w.borrowed = false;
  w.rtt[w.count++ % w.rtt.size()] = seconds;
  w.last = count;
}
}  // namespace

// Codec auto: a partner's link takes the round trips of all our links (all_links_) in the codecs
// it has not timed itself while fresh, as borrowed windows (its own first round trip in a codec
// replaces them). Where one of them is heavier than the lightest codec, the heavier codecs are
// timed already, and are not retried before kRetryFirst.
void Gossip::borrow_links(CodecLinks& mine) const {
  for (std::size_t k = 0; k < all_links_.windows.size(); ++k) {
    const RttWindow& all = all_links_.windows[k];
    RttWindow& w = mine.windows[k];
    if ((mine.fresh(k) && !w.borrowed) || !all_links_.fresh(k)) continue;
    w = all;
    w.last = mine.count;
    w.borrowed = true;
    if (k + 1 < all_links_.windows.size()) mine.retry_at = std::max(mine.retry_at, mine.count + kRetryFirst);
  }
}

// Codec auto: a partner's link borrowed our other links' round trips (note_round_trip), and its
// own first round trip in kAutoCodecs[slot] took `seconds`. A link is as slow as its slower
// end: where the partner's end is the slower (its round trip over kCodecSlack times what a
// codec of as many bytes or more took on our other links) or the faster (under 1/kCodecSlack
// of a codec of as few bytes or fewer), what was borrowed says nothing of this link, and is
// dropped. On the testbed's S4, the fast peers' links borrowed float32's few milliseconds,
// and their first exchanges with the peer on 10 Mbit went float32 (docs/testbed.md).
void Gossip::forget_other_links(CodecLinks& l, std::size_t slot, double seconds) const {
  bool slower = false, faster = false;
  for (std::size_t k = 0; k < l.windows.size(); ++k) {
    const RttWindow& w = l.windows[k];
    if (!w.borrowed || w.count == 0) continue;
    slower = slower || (k <= slot && seconds > kCodecSlack * w.min());  // k <= slot: as many bytes or more
    faster = faster || (k >= slot && seconds * kCodecSlack < w.min());
  }
  if (!slower && !faster) return;
  for (RttWindow& w : l.windows)
    if (w.borrowed) w = RttWindow{};
  // Faster than our other links: the heavier codecs may fit it, and are tried soon. Slower:
  // its bytes are likely its cost, and a heavier codec waits for the usual retry.
  l.retry_at = faster ? std::min(l.retry_at, l.count + kRetryNew) : std::max(l.retry_at, l.count + kRetryFirst);
  l.probe_new = false;
}

// --local-steps auto: an exchange of ours took `seconds` from request to mix. H is the least
// number of steps whose compute is at least rtt / exchange_share, so that the link spends at
// most that share of our compute time on our exchanges. rtt is the shortest of the last 4: the
// link's own cost. The others also waited for a partner that was loading, evaluating or off
// its core, which loads no link; taking them (an earlier version took the median of 8 and
// let H at most double per exchange) spaced the quickstart's exchanges 50-130 steps apart on
// loopback, and followed a link that slowed only after seconds. With codec auto, H is the
// H of the codec that all our round trips choose (choose_codec).
void Gossip::note_round_trip(double seconds, PayloadCodec codec, const PeerId& peer) {
  if (!auto_timing()) return;
  const bool auto_codec = cfg_.codec == PayloadCodec::Auto;
  const std::size_t slot = auto_codec ? auto_codec_slot(codec) : 0;
  RUMOR_CHECK(slot < all_links_.windows.size(), "a round trip in a codec that auto does not choose");
  CodecLinks* link = nullptr;
  if (auto_codec) {
    auto it = partner_links_.find(peer);
    if (it == partner_links_.end()) {
      if (partner_links_.size() >= kPartnerLinks)
        partner_links_.erase(std::min_element(partner_links_.begin(), partner_links_.end(),
                                              [](const auto& x, const auto& y) { return x.second.used < y.second.used; }));
      it = partner_links_.emplace(peer, PartnerLink{}).first;
      // Until a codec's first round trip with it, its window is borrowed from all our links
      // (where fresh): a swarm of equal links probes nothing more per partner. With nothing
      // but the lightest codec to borrow, the heavier ones are tried soon (kRetryNew).
      CodecLinks& mine = it->second.links;
      mine.probe_new = true;
      borrow_links(mine);
    }
    it->second.used = all_links_.count + 1;
    link = &it->second.links;
    forget_other_links(*link, slot, seconds);
    add_round_trip(link->windows[slot], ++link->count, kRttFresh, seconds);
    // A new link's heavier codecs: where its round trips in this codec are as our other
    // links' (within kCodecSlack) and those have timed a heavier codec, it borrows them; else,
    // once we have kRetryNew round trips in all, it tries one (a retry, choose_codec), and the
    // next new link waits kRttFresh round trips of ours for that to be timed. So in a swarm
    // of equal links one link per peer pays a heavier round trip, not each, and a swarm whose
    // links' cost is their latency goes float32 after a few exchanges, however rare.
    if (link->probe_new) {
      const RttWindow& all = all_links_.windows[slot];
      bool heavier = false;
      for (std::size_t k = 0; k + 1 < all_links_.windows.size(); ++k)
        heavier = heavier || all_links_.fresh(k);
      if (heavier && all.count > 0 && link->windows[slot].min() <= kCodecSlack * all.min()) {
        borrow_links(*link);
        link->probe_new = false;
      } else if (all_links_.count + 1 >= new_link_probe_at_) {
        link->retry_at = link->count;
        link->probe_new = false;
        new_link_probe_at_ = all_links_.count + 1 + kRttFresh;
      }
    }
  }
  RttWindow& w = all_links_.windows[slot];
  add_round_trip(w, ++all_links_.count, kRttFresh, seconds);
  if (!(step_seconds() > 0)) return;
  const double budget = cfg_.exchange_share * compute_seconds();
  double h = std::max(1.0, std::ceil(w.min() / budget));
  if (auto_codec) {
    h = choose_codec(all_links_, codec, budget);
    choose_codec(*link, codec, budget);
  }
  if (cfg_.local_steps) return;
  // An exchange's own CPU is part of its cost. On a peer with a small share of a core the
  // round trip misses most of it: S2's straggler, at 0.075 of a core, timed 1.2-1.9 ms round
  // trips whenever its CFS quota lasted (and 93-100 ms when it ran out); by the round trips
  // alone its H was 1 at 5 of its 8 evaluations, and it started 251 exchanges in 705 steps
  // (docs/ARCHITECTURE.md "Local steps chosen by the peer").
  h = std::max(h, std::ceil(exchange_cpu_seconds() / budget));
  // Until the window is full, H grows at most 8-fold per round trip: the first ones come while the
  // partners load, evaluate step 0 or wait for a core slice, and the shortest of one or two
  // such is no measure of the link. Unchecked, one 95 ms round trip at the start on a testbed
  // machine capped at 0.3 of a core set H = 716, and the next exchange never came in a 705-step
  // run (bench/HISTORY.md "The race of --local-steps auto").
  if (all_links_.count < 4) h = std::min(h, 8.0 * static_cast<double>(auto_local_steps_));
  auto_local_steps_ = static_cast<std::uint64_t>(std::clamp(h, 1.0, static_cast<double>(GossipConfig::kAutoMaxLocalSteps)));
}

PayloadCodec Gossip::codec_for(const PeerId& peer) const {
  if (cfg_.codec != PayloadCodec::Auto) return cfg_.codec;
  const auto it = partner_links_.find(peer);
  const bool timed = it != partner_links_.end() && it->second.links.chosen;
  if (settling_codec()) {
    // A link whose bytes are its cost settles in its compressed codec while the models are
    // apart, then in float32 for the last, exact exchanges (CodecLinks::settle_codec). A
    // partner not timed yet: the lightest codec while apart (as below).
    const Member* m = view_.find(peer);
    const bool apart = !m || !(m->ex_distance < kSettleExactDistance);
    if (!apart) return PayloadCodec::None;
    return timed ? it->second.links.settle_codec : kLightestAuto;
  }
  // A partner not timed yet gets the lightest codec, whatever our other links chose: its
  // first round trip costs little on any link, and tells this link from ours
  // (forget_other_links).
  return timed ? it->second.links.codec : kLightestAuto;
}

bool Gossip::useful(const Member& m) const {
  return !(m.ex_distance < kAgreeDistance) || m.d.clock != m.ex_clock || m.ex_version != model_version_;
}

bool Gossip::anyone_useful() const {
  for (const Member* m : view_.alive())
    if (!m->d.done || useful(*m)) return true;
  return false;
}

bool Gossip::far_finished(const Member& m) const {
  return cfg_.settle_far_distance > 0 && m.d.done && m.ex_version > done_version_ && !std::isnan(m.ex_distance) &&
         !(m.ex_distance < cfg_.settle_far_distance);
}

bool Gossip::far_finished_member() const {
  for (const Member* m : view_.alive())
    if (far_finished(*m)) return true;
  return false;
}

bool Gossip::partner_fits(const Member& m, Partners partners) const {
  switch (partners) {
    case Partners::Any: return true;
    case Partners::Useful: return useful(m);
    case Partners::Far: return far_finished(m);
  }
  return false;
}

double Gossip::slowest_training_step() const {
  double s = 0;
  for (const Member* m : view_.alive())
    if (!m->d.done) s = std::max(s, m->step_seconds);
  return s;
}

void Gossip::mixed_with(const PeerId& peer, std::uint64_t their_clock, std::uint32_t fragment) {
  // Outer momentum (core/outer.hpp): the next outer step counts local progress from here.
  const bool stepped = outer_.active() && !outer_paused_;
  const std::uint64_t lo = ExchangeMsg::fragment_lo(params_.size(), fragment, fragments_);
  outer_.rebase(params_, lo, ExchangeMsg::fragment_lo(params_.size(), fragment + 1, fragments_) - lo);
  const std::uint64_t before = model_version_;
  const bool agree = stats_.last_distance < kAgreeDistance;
  if (stepped || !agree) ++model_version_;
  if (Member* m = view_.find(peer)) {
    double distance = stats_.last_distance;
    if (fragments_ > 1) {
      // One fragment equal says nothing of the others: "equal" once all were, in a row, with
      // neither model changing in between.
      if (!agree || m->ex_clock != their_clock || m->ex_version != before) m->ex_agree = 0;
      if (agree) m->ex_agree |= std::uint64_t{1} << fragment;
      const std::uint64_t all = fragments_ >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << fragments_) - 1;
      if (agree && m->ex_agree != all) distance = kAgreeDistance;  // not below it: still useful
    }
    m->ex_distance = distance;
    m->ex_clock = their_clock;
    m->ex_version = model_version_;
  }
}

bool Gossip::start_exchange(Partners partners) {
  const double now = env_.now();
  std::vector<PeerId> candidates;
  // Members still training come first: while any is alive, only those are picked (one that is
  // busy now is tried again at the next chance rather than passed over for a finished one).
  // A member whose last model we refused or clipped (bad input, --robust) counts as finished
  // here: picked only when no other is left, so that it cannot draw a peer's exchanges to itself
  // by looking like the last one training.
  const auto preferred = [](const Member& m) { return !m.d.done && !m.screened; };
  const auto usable = [&](const PeerId& id, const Member& m) {
    return m.d.state == MemberState::Alive && m.skip_until <= now && find_out(id) == npos && !answering(id) &&
           partner_fits(m, partners);
  };
  // Partial views: the active view, and every fresh_every-th draw the passive view.
  const bool bounded = overlay_ && cfg_.neighbours.empty();
  if (bounded) {
    if (auto p = overlay_partner(partners)) candidates.push_back(*p);
    else return false;
  }
  if (!bounded && cfg_.neighbours.empty()) {
    // Uniform over the usable Alive members. Most are usable, so a few random draws from the
    // Alive list find one in O(1) even in a swarm of thousands; only when those all miss is
    // the list scanned.
    const auto& alive = view_.alive();
    for (int tries = 0; tries < 8 && !alive.empty(); ++tries) {
      const Member* m = alive[env_.rng().below(alive.size())];
      if (preferred(*m) && usable(m->d.id, *m)) {
        candidates.push_back(m->d.id);
        break;
      }
    }
  }
  if (!bounded && candidates.empty()) {
    std::vector<PeerId> finished;  // usable, but not preferred: taken only if nobody preferred is alive
    bool anyone_preferred = false;
    const auto consider = [&](const PeerId& id, const Member& m) {
      if (m.d.state != MemberState::Alive) return;
      anyone_preferred = anyone_preferred || preferred(m);
      if (usable(id, m)) (preferred(m) ? candidates : finished).push_back(id);
    };
    if (cfg_.neighbours.empty()) {
      for (const Member* m : view_.alive()) consider(m->d.id, *m);
    } else {
      for (const auto& id : cfg_.neighbours)
        if (const Member* m = view_.find(id)) consider(id, *m);
    }
    if (candidates.empty() && !anyone_preferred) candidates = std::move(finished);
  }
  if (candidates.empty()) return false;  // stays due: starts as soon as someone is available
  if (partners != Partners::Any && !bounded && candidates.size() > 1) {
    // Settling: the member we mixed with longest ago (never, first), so that a few exchanges
    // each reach every model of a small swarm, as rounds of pairs would, instead of random
    // draws that repeat a pair while a third model waits (docs/ARCHITECTURE.md "Settling").
    std::vector<PeerId> longest_ago;
    std::uint64_t oldest = ~std::uint64_t{0};
    for (auto& id : candidates) {
      const Member* m = view_.find(id);
      const std::uint64_t last_mix = m ? m->ex_version : 0;
      if (last_mix < oldest) {
        oldest = last_mix;
        longest_ago.clear();
      }
      if (last_mix == oldest) longest_ago.push_back(std::move(id));
    }
    candidates = std::move(longest_ago);
  }
  const PeerId peer = candidates[env_.rng().below(candidates.size())];
  Outstanding o{next_exchange_id_++, peer, {}, my_weight(), now, {}};
  o.fragment = static_cast<std::uint32_t>(fragment_turn_++ % fragments_);
  o.codec = last_codec_ = codec_for(peer);
  ExchangeMsg h = our_exchange_header(o.id, o.weight, o.fragment, o.codec);
  if (cfg_.codec == PayloadCodec::Int4) {
    // Streamed, x_s as the residual against our references, or absolute int8 if we hold none
    // for this range; the responder's reply says whether its references agree (gossip_int4.cpp).
    o.streamed = true;
    h.ref_hash = int4_hash(peer, h, true);
    h.absolute = o.absolute = h.ref_hash == 0;
    env_.send(peer, make_message(MsgType::ExchangeRequest, h, nullptr));
    int4_encode(peer, h, o.absolute, o.snap);
    env_.send(peer, make_message(MsgType::ExchangePayload, h, o.snap.chunks.front()));
  } else if (cfg_.codec == PayloadCodec::TopK) {
    o.snap.chunks = {sparse_request(o.sparse_idx)};  // one-shot: the reply depends on the request
    env_.send(peer, make_message(MsgType::ExchangeRequest, h, o.snap.chunks[0]));
  } else if (!cfg_.stream_exchanges) {
    o.snap = send_snapshot(peer, MsgType::ExchangeRequest, h, true);  // one-shot: the request carries x_s
  } else {
    // Streamed: the header first, so the responder's reply travels while x_s is copied and sent.
    o.streamed = true;
    env_.send(peer, make_message(MsgType::ExchangeRequest, h, nullptr));
    o.snap = send_snapshot(peer, MsgType::ExchangePayload, h, false);
  }
  stats_.payload_bytes_sent += o.snap.bytes();
  ++stats_.payloads_sent;
  o.deadline = now + cfg_.exchange_timeout_s;
  arm_deadline(kExchangeDeadline, o.deadline, cfg_.exchange_timeout_s);
  out_.push_back(std::move(o));
  steps_since_exchange_ = 0;
  return true;
}

bool Gossip::answering(const PeerId& peer) const {
  return std::any_of(in_.begin(), in_.end(), [&](const Incoming& x) { return x.peer == peer; });
}

std::size_t Gossip::find_out(const PeerId& peer, std::optional<std::uint64_t> id) const {
  for (std::size_t i = 0; i < out_.size(); ++i)
    if (out_[i].peer == peer && (!id || out_[i].id == *id)) return i;
  return npos;
}

void Gossip::fail_exchange(std::size_t index, const std::string& reason, bool peer_busy) {
  RUMOR_CHECK(index < out_.size());
  const PeerId peer = out_[index].peer;
  out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(index));
  ++stats_.failed;
  env_.event(ev(ProtocolEvent::Kind::ExchangeFailed, peer, reason));
  if (!peer_busy) note_failure(peer);  // a peer that answered is healthy: just pick again
}

std::vector<Gossip::OpenExchange> Gossip::open_exchanges() const {
  std::vector<OpenExchange> v;
  for (const Outstanding& o : out_) {
    std::vector<const Message*> reply;
    for (const Message& m : o.reply.chunks) reply.push_back(&m);
    const std::size_t lo = static_cast<std::size_t>(ExchangeMsg::fragment_lo(params_.size(), o.fragment, fragments_));
    v.push_back({o.peer, o.id, o.weight, o.snap.view(), o.accepted, o.streamed, std::move(reply), lo});
  }
  return v;
}

void Gossip::decline_exchange(std::size_t index, const std::string& reason) {
  RUMOR_CHECK(index < out_.size());
  const PeerId peer = out_[index].peer;
  out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(index));
  ++stats_.declined;
  env_.event(ev(ProtocolEvent::Kind::ExchangeDeclined, peer, reason));
}

void Gossip::note_failure(const PeerId& peer) {
  Member* m = view_.find(peer);
  if (!m) return;
  ++m->failures;
  const double now = env_.now();
  m->skip_until = now + cfg_.failure_backoff_s * std::min(m->failures, 8);
  if (m->failures >= cfg_.suspect_after_failures && m->d.state == MemberState::Alive) schedule_suspicion(peer);
}

void Gossip::schedule_suspicion(const PeerId& peer) {
  if (auto c = view_.set_state(peer, MemberState::Suspect, env_.now())) report_change(*c);
  env_.set_timer(cfg_.suspect_timeout_s, timer_id(kSuspectCheck, ++timer_seq_));
}

bool Gossip::on_idle(bool exchange, Partners partners) {
  const bool started =
      exchange && out_.size() < cfg_.max_in_flight && state_ready_ && !leaving_ && start_exchange(partners);
  // Probe the members holding the bound back, so news of their clocks reaches us even when no
  // exchange with them is under way.
  if (std::isfinite(cfg_.staleness) && !may_step()) {
    const std::uint64_t slowest = slowest_clock();
    for (const Member& m : view_.members())
      if (m.d.state == MemberState::Alive && !m.d.done && m.d.clock == slowest)
        env_.send(m.d.id, make_message(MsgType::Ping, PingMsg{++ping_seq_, digest(), {}}));
  }
  return started;
}

std::uint64_t Gossip::slowest_clock() const {
  std::uint64_t s = clock_;
  bool any = false;
  for (const Member* m : view_.alive())  // a minimum: any order gives it (the list is contiguous)
    if (!m->d.done) {
      s = any ? std::min(s, m->d.clock) : m->d.clock;
      any = true;
    }
  return s;
}

bool Gossip::may_step() const {
  if (!std::isfinite(cfg_.staleness)) return true;
  return static_cast<double>(clock_) <= static_cast<double>(slowest_clock()) + cfg_.staleness;
}

std::uint64_t Gossip::chunk_floats() const {
  return std::max<std::uint64_t>(cfg_.exchange_chunk_bytes / sizeof(float), kMinExchangeChunk);
}

std::shared_ptr<Bytes> Gossip::snapshot_buffer(std::size_t n) {
  if (!cfg_.pool_snapshots) return std::make_shared<Bytes>(n);
  for (const auto& b : snapshot_pool_)
    if (b.use_count() == 1 && b->size() == n) {
      // Only the pool holds it, so nobody else can take a new reference. use_count() is a
      // relaxed load: this fence orders it after the release of the last other reference
      // (the transport's, on its I/O thread), so that its reads of the buffer happen before
      // our writes.
      std::atomic_thread_fence(std::memory_order_acquire);
      return b;
    }
  auto b = std::make_shared<Bytes>(n);
  const std::uint64_t per_snapshot = (params_.size() + chunk_floats() - 1) / chunk_floats();
  const std::size_t cap = (cfg_.max_in_flight + 1) * std::max<std::uint64_t>(per_snapshot, 1);
  if (snapshot_pool_.size() < cap) {
    snapshot_pool_.push_back(b);
  } else {
    // Full: replace an idle buffer of another size (the pool's sizes follow the model's chunks).
    const auto idle = std::find_if(snapshot_pool_.begin(), snapshot_pool_.end(),
                                   [](const std::shared_ptr<Bytes>& x) { return x.use_count() == 1; });
    if (idle != snapshot_pool_.end()) *idle = b;
  }
  return b;
}

Gossip::SentSnapshot Gossip::send_snapshot(const PeerId& to, MsgType type, ExchangeMsg h, bool one_message) {
  SentSnapshot snap;
  const std::span<const float> x = range_of(h);  // the fragment (the whole model: fragments 1)
  if (h.codec != PayloadCodec::None) {
    auto b = std::make_shared<Bytes>(encode_dense(h.codec, x));
    snap.decoded.resize(x.size());
    decode_dense(h.codec, *b, snap.decoded);
    snap.chunks = {b};
    env_.send(to, make_message(type, h, b));
    return snap;
  }
  // Each chunk is copied and hashed, then handed to the transport at once: its bytes are on
  // the wire while the next one is copied, and the responder checks it as it lands.
  const std::uint64_t n = x.size();
  const std::uint64_t step = one_message || n <= chunk_floats() ? n : chunk_floats();
  h.chunk = step == n ? 0 : step;
  std::uint64_t off = 0;
  do {
    const std::uint64_t len = std::min(step, n - off);
    auto b = snapshot_buffer(len * sizeof(float));
    const std::span<const std::uint8_t> src(reinterpret_cast<const std::uint8_t*>(x.data() + off), b->size());
    h.offset = off;
    if (off > 0) h.view.clear();  // the view travels once, with the first chunk
    Message msg = make_message(type, h, b);
    msg.payload_digest = copy_and_hash(src, b->data());
    snap.chunks.push_back(b);
    env_.send(to, std::move(msg));
    off += len;
  } while (off < n);
  return snap;
}

Pieces Gossip::SentSnapshot::view() const {
  if (!decoded.empty()) return Pieces(std::span<const float>(decoded));
  Pieces p;
  for (const auto& c : chunks) p.parts.push_back(as_floats(*c));
  return p;
}

bool Gossip::ReceivedSnapshot::add(const Message& msg, const ExchangeMsg& h) {
  if (h.offset != floats) return false;
  chunks.push_back(msg);
  floats += h.floats_here();
  return true;
}

Pieces Gossip::ReceivedSnapshot::view() const {
  Pieces p;
  for (const Message& m : chunks) p.parts.push_back(as_floats(*m.payload));
  return p;
}

std::size_t Gossip::SentSnapshot::bytes() const {
  std::size_t n = 0;
  for (const auto& c : chunks) n += c->size();
  return n;
}

void Gossip::on_send_failed(const PeerId& peer, const std::string& reason) {
  if (!joined_ && std::find(seeds_.begin(), seeds_.end(), peer) != seeds_.end()) join_errors_[peer] = reason;
  // Partial views: an unreachable member leaves the active view at once (repaired from the
  // passive view); a passive one we asked to link is forgotten.
  if (overlay_ && (overlay_->in_active(peer) || overlay_->pending.count(peer))) {
    if (overlay_->pending.count(peer)) overlay_->remove(peer);
    overlay_lost(peer, false);
  } else if (overlay_ && overlay_->in_passive(peer)) {
    overlay_->remove(peer);  // a stale candidate (a fresh draw found it gone): not taken back for a while
    overlay_->buried[peer] = env_.now();
  }
  if (auto i = find_out(peer); i != npos)
    fail_exchange(i, "unreachable: " + reason, false);
  else
    note_failure(peer);  // a probe or a reply that could not be delivered
}

void Gossip::on_timer(std::uint64_t id) {
  const auto kind = static_cast<TimerKind>(id >> 56);
  const std::uint64_t seq = id & ((std::uint64_t(1) << 56) - 1);
  const double now = env_.now();
  switch (kind) {
    case kExchangeDeadline:
    case kIncomingDeadline:
      on_deadline(kind, seq);
      break;
    case kJoinRetry:
      if (!joined_ && !join_failed_) {
        send_join_requests();
        join_retry_gap_ = std::min(2 * join_retry_gap_, cfg_.join_retry_s);
        env_.set_timer(join_retry_gap_, timer_id(kJoinRetry, ++timer_seq_));
      }
      break;
    case kJoinDeadline:
      on_join_deadline();
      break;
    case kProbe:
    case kProbeTimeout:
    case kProbeIndirect:
      on_probe_timer(kind, seq);
      break;
    case kStateTimeout:
      on_state_timeout(seq);
      break;
    case kLeaveTimeout:
      if (leaving_ && !left_ && seq == leave_seq_) {
        if (leave_attempts_ < 2) {
          // Nobody took the model yet: one more member, then give up.
          std::vector<PeerId> others;
          for (const Member& m : view_.members())
            if (m.d.state == MemberState::Alive && m.d.id != leave_target_) others.push_back(m.d.id);
          if (!others.empty()) {
            send_leave(others[env_.rng().below(others.size())]);
            break;
          }
        }
        left_ = true;
      }
      break;
    case kShuffle:
      overlay_shuffle();
      break;
    case kOverlayState:
      // Partial views: no neighbour brought by the join walk had a model for us in time.
      overlay_fill();  // no walk linked us: our own requests
      if (joined_ && !state_ready_ && !transfer_) {
        PeerId source = overlay_ ? overlay_state_source() : PeerId{};
        if (source.empty() && !seeds_.empty()) source = seeds_[env_.rng().below(seeds_.size())];
        if (!source.empty()) start_state_transfer(source);
      }
      break;
    case kSuspectCheck: {
      std::vector<PeerId> expired;
      for (const Member& m : view_.members())
        if (!cfg_.test_keep_dead && m.d.state == MemberState::Suspect && now - m.suspect_since >= cfg_.suspect_timeout_s - 1e-9)
          expired.push_back(m.d.id);
      for (const auto& pid : expired)
        if (auto c = view_.set_state(pid, MemberState::Dead, now)) report_change(*c);
      break;
    }
  }
}

void Gossip::arm_deadline(TimerKind kind, double deadline, double delay) {
  DeadlineTimer& t = kind == kExchangeDeadline ? out_deadline_ : in_deadline_;
  if (t.at >= 0 && t.at <= deadline) return;  // the pending timer comes first and re-arms for this one
  t.at = deadline;
  t.seq = ++timer_seq_;
  env_.set_timer(delay, timer_id(kind, t.seq));
}

void Gossip::on_deadline(TimerKind kind, std::uint64_t seq) {
  DeadlineTimer& t = kind == kExchangeDeadline ? out_deadline_ : in_deadline_;
  if (seq != t.seq) return;  // replaced by an earlier one
  const double fired = t.at;
  t.at = -1;
  const double now = env_.now();
  // Due: a deadline at or before the time this timer was set for (within rounding: a re-armed
  // timer's time is computed), not before now. A peer busy with a step sees its timers and
  // messages only when the step ends, in the order they came: a reply that came before its
  // exchange's deadline, behind this timer, must still count. A deadline that passed while
  // the peer was busy gets a timer now, behind what came before it.
  const auto due = [fired](double d) { return d <= fired + 1e-9; };
  double next = -1;
  if (kind == kExchangeDeadline) {
    // Each exchange whose deadline came is given up, oldest first (giving one up may change out_).
    for (;;) {
      const auto it = std::find_if(out_.begin(), out_.end(), [&](const Outstanding& o) { return due(o.deadline); });
      if (it == out_.end()) break;
      fail_exchange(static_cast<std::size_t>(it - out_.begin()), "no reply within the exchange deadline", false);
    }
    for (const Outstanding& o : out_) next = next < 0 ? o.deadline : std::min(next, o.deadline);
  } else {
    // The initiator's payload never came: drop our half (nothing mixed; it mixes nothing
    // without our accept either).
    std::erase_if(in_, [&](const Incoming& x) { return due(x.deadline); });
    for (const Incoming& x : in_) next = next < 0 ? x.deadline : std::min(next, x.deadline);
  }
  // (A deadline already passed, seen late by a busy peer, gives a negative delay: Env::set_timer.)
  if (next >= 0) arm_deadline(kind, next, next - now);
}

void Gossip::on_message(const PeerId& from, const Message& msg) {
  switch (msg.type) {
    case MsgType::ExchangeRequest: return on_exchange_request(from, msg);
    case MsgType::ExchangeReply: return on_exchange_reply(from, msg);
    case MsgType::ExchangeBusy: return on_busy(from, msg);
    case MsgType::ExchangePayload: return on_exchange_payload(from, msg);
    case MsgType::ExchangeAccept: return on_exchange_accept(from, msg);
    case MsgType::JoinRequest: return on_join_request(from, msg);
    case MsgType::JoinReply: return on_join_reply(from, msg);
    case MsgType::Ping:
    case MsgType::Ack: return on_ping(from, msg);
    case MsgType::PingReq: return on_ping_req(from, msg);
    case MsgType::StateRequest: return on_state_request(from, msg);
    case MsgType::StateChunk: return on_state_chunk(from, msg);
    case MsgType::Leave: return on_leave(from, msg);
    case MsgType::LeaveAck: return on_leave_ack(from, msg);
    case MsgType::Overlay: return on_overlay(from, msg);
    default:
      return reject(from, std::string("unexpected message type ") + msg_type_name(msg.type));
  }
}

void Gossip::reject(const PeerId& from, const std::string& reason) {
  if (Member* m = view_.find(from)) m->screened = true;
  ++stats_.rejected;
  env_.event(ev(ProtocolEvent::Kind::Rejected, from, reason));
  env_.disconnect(from);
}

}  // namespace rumor
