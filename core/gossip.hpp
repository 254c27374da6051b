// The gossip protocol of one peer, as a pure state machine behind Env (sans-I/O): push-pull
// parameter exchanges with a uniformly random live neighbour every H local steps, mixing by the
// overlap rule (core/mix.hpp), membership piggybacked on every message (core/view.hpp), joins
// through seeds, state transfer to joiners, graceful leave with model hand-over, and failure
// detection: SWIM probes (Ping; PingReq through `indirect_probes` others; then Suspect, and Dead
// `suspect_timeout_s` later unless refuted; gossip_membership.cpp) plus `suspect_after_failures`
// failed exchanges in a row. PeerLoop (core/peer_loop.hpp) owns it and is what rumor-peer,
// rumor-sim and the Python module drive; core's unit tests drive it alone
// (tests/core/cluster.hpp). Handlers: gossip_exchange.cpp, gossip_sparse.cpp (topk),
// gossip_join.cpp, gossip_membership.cpp.
//
// An exchange, numbered as it happens:
//  1. on_step_done: H steps since the last one and fewer than max_in_flight exchanges open ->
//     pick a live neighbour that is not being skipped and not already in one, send
//     ExchangeRequest{id, clock, weight a, view} *without* parameters, then snapshot x_s and
//     send ExchangePayload{same fields} + x_s; arm a deadline timer. (Streamed exchange: the
//     responder's reply does not depend on x_s, so it can travel while x_s does. A large
//     model's x_s and y_s go in chunks, each sent as soon as it is copied and checked as it
//     lands: GossipConfig::exchange_chunk_bytes.)
//  2. The responder, on the request (at its next step boundary, on_message): checks the header
//     and the parameter count, merges the view, applies the busy rules below, snapshots y_s
//     and replies ExchangeReply{id, clock, weight b, view} + y_s at once, keeping y_s. On the
//     ExchangePayload: checks that every value of x_s is finite (else: Rejected event,
//     disconnect, nothing mixed; the receiving transport may have checked it as it landed,
//     Message::payload_finite), screens it (--robust), sends ExchangeAccept{id}, then applies
//     y += a/(a+b) (x_s - y_s). Training may go on in between; the overlap rule keeps it.
//  3. The initiator mixes only when it has both the reply and the accept (so a responder that
//     refused x_s leaves both sides unmixed): the same checks on y_s, then
//     x += b/(a+b) (y_s - x_s) and the exchange is done. Training went on meanwhile and its
//     progress is kept.
//  (A request that carries its payload, as the topk codec sends, is the one-shot form: the
//  responder checks x_s, replies, mixes, and the initiator mixes on the reply alone.)
//  4. Deadline, send failure or an ExchangeBusy: the exchange is given up (nothing mixed on our
//     side), the peer is skipped for a while, and after `suspect_after_failures` failures in a
//     row it is suspected, then declared dead `suspect_timeout_s` later unless it refutes.
// Two peers that start exchanges with each other at once: the request from the peer with the
// smaller id is answered, the other gets ExchangeBusy, so a pair never swaps models.
// Fragments (GossipConfig::fragments): every message of an exchange names one contiguous range
// of the parameters, chosen by the initiator in turn; snapshots, mixes and outer steps cover
// that range only. The int4 codec (gossip_int4.cpp) encodes x - ref against per-partner
// references and falls back to absolute int8 for an exchange whose references differ.
//
// Contract: every method is called between two training steps, one at a time; `params` stays
// valid and at the same address for the lifetime of the object.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/codec.hpp"
#include "core/codec_refs.hpp"
#include "core/env.hpp"
#include "core/message.hpp"
#include "core/mix.hpp"
#include "core/outer.hpp"
#include "core/overlay.hpp"
#include "core/protocol_messages.hpp"
#include "core/robust.hpp"
#include "core/view.hpp"

namespace rumor {

enum class MixWeight { Uniform, Samples };
// Full: every peer holds every member it has heard of (O(n) per peer). Partial: bounded active
// and passive views (HyParView; core/overlay.hpp, core/gossip_overlay.cpp). Auto: full while
// the swarm is small, partial once a peer knows of more than `view_threshold` members or joins
// a swarm that runs partial views.
enum class ViewMode { Full, Partial, Auto };

struct GossipConfig {
  std::uint64_t local_steps = 0;     // H: exchange every H local steps; 0 (the default): auto (local_steps_now())
  // local_steps = 0 (auto): H is chosen so that an exchange's round trip is at most this
  // share of the compute time between two exchanges (H step times), from the wall time per step
  // over the last few seconds (pauses left out) and the shortest of the last 4 round trips, within 1..kAutoMaxLocalSteps.
  // codec = Auto: each exchange we start goes in the lightest codec of kAutoCodecs whose round
  // trip needs at most kCodecSlack times the fewest steps between exchanges by that rule; a
  // fixed H takes the lightest whose round trip fits in this share of H steps.
  double exchange_share = 0.2;
  // Settling (PeerLoop::settle_next) goes on while a finished member was at least this far from
  // us at our last exchange since we finished (far_finished()); 0: off. Above what the int8
  // codec leaves between models that agree (0.004-0.019 in S4's settling, real and simulated),
  // so that a fixed compressed codec does not hold every peer to its deadline; below where a
  // peer left with its own model lost points (0.05-0.17 in S4).
  double settle_far_distance = 0.03;
  static constexpr std::uint64_t kAutoMaxLocalSteps = 1024;
  MixWeight mix_weight = MixWeight::Uniform;
  PayloadCodec codec = PayloadCodec::None;
  // Bounded staleness (SSP). A peer at clock c (local steps done) starts its next step only
  // while c <= slowest + staleness, where `slowest` is the smallest clock among the *other*
  // alive members it knows of; and an exchange between peers whose clocks differ by more than
  // `staleness` is refused (ExchangeBusy "stale"), so a model that far behind is never mixed.
  // 0 = lockstep; infinity (the default) = fully asynchronous.
  double staleness = INFINITY;
  // topk codec (core/sparse.hpp): the fraction of the coordinates averaged per exchange.
  double topk_fraction = 0.01;
  // Fragments (Streaming DiLoCo): the parameter vector is cut into this many contiguous
  // near-equal ranges and our k-th exchange averages only range k mod fragments (both sides
  // mix that range only, the dense codecs encode it only), so an exchange carries 1/fragments
  // of the bytes. 1: the whole model. Both sides of an exchange must agree (a request with
  // another count is declined); not with topk (PeerLoop's settings check refuses it). A model
  // with fewer parameters than this is cut into as many fragments as it has parameters.
  std::uint64_t fragments = 1;
  // int4 codec (core/codec_refs.hpp): partners whose references are kept (2 x the model's
  // float32 each), the least recently used dropped first; an exchange with a partner whose
  // references were dropped goes absolute int8 once. Fewer than the partners a peer draws
  // (about n - 1 in a full view) and most exchanges go absolute: int8's bytes and accuracy.
  std::uint64_t int4_partners = kInt4RefPartners;  // knob codec_partners
  // Exchanges we may have started and not finished, each with another peer. More than one
  // keeps mixing going when round trips take several steps (peers sharing cores); the overlap
  // rule keeps every exchange conserving the sum however they interleave. At most 2: with two
  // open exchanges plus one answered meanwhile, our own weight in the result can already reach
  // zero, and beyond that it goes negative and averaging stops contracting (the in-memory
  // cluster test shows it diverging with 3).
  std::size_t max_in_flight = 2;
  // Dense codecs: start exchanges in the streamed form (request header, then x_s; the reply
  // travels meanwhile; see the steps above). false: the one-shot form, whose request carries
  // x_s and whose responder answers only after checking it (bench_exchange_throughput
  // --one-shot compares the two). A responder answers either form whatever this says. The
  // int4 codec always streams (gossip_int4.cpp: one form to handle; a request carrying its
  // payload is refused as bad input).
  bool stream_exchanges = true;
  // Codec none: a snapshot larger than this travels in chunks of this size, each copied,
  // hashed and handed to the transport in turn, so its first bytes are on the wire while the
  // rest is still being copied, and the receiver checks each chunk as it lands (docs/wire.md;
  // bench_exchange_throughput --chunk-mib). At least kMinExchangeChunk floats (256 KiB).
  std::size_t exchange_chunk_bytes = 4u << 20;
  double exchange_timeout_s = 5.0;   // whole exchange deadline
  // Outer momentum (gossip-DiLoCo, core/outer.hpp): every mix ends with an outer optimizer step
  // on the mixed model; off (lr 1, momentum 0) by default.
  OuterConfig outer;
  double failure_backoff_s = 1.0;    // skip a failed peer for backoff * failures (capped at 8x)
  int suspect_after_failures = 3;
  double suspect_timeout_s = 5.0;    // Suspect -> Dead unless refuted
  // Resend JoinRequest to the seeds until one answers: first after kJoinRetryFirst, each gap
  // twice the last, up to this. Peers launched together (torchrun-style, a Slurm job, the
  // testbed) load for about the same time, and one that is ready a few ms before its seed
  // listens has its connect refused: with a flat 1 s retry, p0 of the testbed's S0, S1, S4 and
  // S5 waited 0.94-1.00 s for its peers in 18 of 24 runs (2026-12-07), and now 0.10 s at most.
  double join_retry_s = 1.0;
  static constexpr double kJoinRetryFirst = 0.05;
  // Joining through seeds on a cluster, where peers start in any order: the JoinRequest is
  // resent every join_retry_s until a seed answers or this deadline passes (infinity: retry
  // for ever). At the deadline, a peer that no member has answered or reached
  //  - fails (join_failed(); the daemon exits 1 with join_failure()), unless
  //  - it is in its own seed list (one of the swarm's founders, e.g. the first two tasks of a
  //    Slurm job or peer-0/peer-1 of a StatefulSet): it then starts the swarm with its own
  //    model (founded()), and keeps retrying the other seeds in the background.
  // A peer that some member reached (an inbound join, a probe) is in a swarm and never fails.
  double join_timeout_s = INFINITY;
  // SWIM failure detector (gossip_membership.cpp): every probe_interval_s, the alive member we
  // heard from least recently (if longer ago than that) gets a Ping; no Ack within
  // probe_timeout_s -> `indirect_probes` others are asked to ping it (PingReq); no news by the
  // end of the interval -> Suspect; suspect_timeout_s later -> Dead unless it refuted. So a
  // crashed peer leaves a view within about probe_interval * (members probed before it) +
  // probe_timeout + probe_interval + suspect_timeout, plus dissemination. One probe runs at a
  // time. Each interval also Pings one member we hold dead (and one seed we never heard of),
  // in turn: after a partition heals, the two sides find each other again (docs/testing.md).
  double probe_interval_s = 0.5;
  double probe_timeout_s = 0.25;
  std::size_t indirect_probes = 2;
  // State transfer for a joiner: fetch the model and the step from the member that answered
  // the join, in chunks, each with a deadline; on a missed deadline restart with another
  // member, up to state_attempts times, then train from our own initialisation. A source that
  // has not trained yet (step 0) has nothing to give: the joiner keeps its own initialisation.
  bool fetch_state = true;
  // After the model, also fetch the source's extra state (set_extra_state: the Python module's
  // optimizer state), if it has one of at most max_extra_state_bytes().
  bool fetch_extra_state = false;
  std::size_t state_chunk_floats = 1u << 18;  // 1 MiB chunks
  double state_timeout_s = 2.0;
  int state_attempts = 4;
  double leave_timeout_s = 1.5;      // wait this long for a LeaveAck, then try one more member
  std::size_t digest_limit = 32;     // members piggybacked per message
  // If non-empty, exchanges are started only with these peers (a fixed topology: ring, torus,
  // ...; the simulator sets it). Empty: any live member, uniformly.
  std::vector<PeerId> neighbours;
  // --robust (core/robust.hpp): a neighbour's model far beyond the distances the swarm has been
  // showing is clipped or refused. Non-finite parameters are refused whatever this says.
  RobustConfig robust;
  // Test-only (the simulator's `faults.mutation = keep_dead`, docs/testing.md): a suspect is
  // never declared dead, so a crashed member is never removed. Never set by the daemon.
  bool test_keep_dead = false;
  // Keep idle snapshot buffers for the next exchange (snapshot_buffer). The simulator turns it
  // off: its thousands of peers would each hold up to max_in_flight + 1 idle copies of their
  // model (half the memory of a 10,000-peer logistic-regression run), and it pays no page
  // faults. Never set by the daemon.
  bool pool_snapshots = true;
  // Membership views (core/gossip_overlay.cpp, docs/ARCHITECTURE.md "Membership"). Auto keeps
  // full views up to view_threshold members: below that a full view costs little (64 digests
  // of about 150 bytes) and its neighbour choice is the complete graph's; above it memory per
  // peer and the probe scan grow with n, and a partial view's log2 n + 1 neighbours suffice.
  ViewMode view = ViewMode::Auto;
  std::size_t view_threshold = 64;
  std::size_t active_view = 0;   // 0: log2(n) + 1 (at least 4) for the swarm's size when it went partial
  std::size_t passive_view = 0;  // 0: 6 x active_view
  double shuffle_interval_s = 2.0;
  // Every k-th exchange partner is drawn from the passive view (a fresh random sample of the
  // swarm, refreshed by shuffles) rather than the active view, so mixing stays close to the
  // complete graph's; 0: always the active view.
  std::size_t fresh_every = 2;
};

struct GossipStats {
  std::uint64_t exchanges = 0;        // completed as initiator
  std::uint64_t answered = 0;         // completed as responder
  std::uint64_t failed = 0;           // initiated and given up: timeout, unreachable, or our input refused
  // Initiated and declined by a healthy peer, as the protocol says it should: two requests
  // crossed (the smaller id's is answered), the peer is joining or leaving, or the clocks are
  // more than TAU apart. Normal operation, not a failure: counted apart and not held against it.
  std::uint64_t declined = 0;
  std::uint64_t rejected = 0;         // bad input refused
  std::uint64_t late_replies = 0;     // replies after their deadline (ignored)
  std::uint64_t stale = 0;            // exchanges refused because the clocks were too far apart
  std::uint64_t payload_bytes_sent = 0;  // encoded parameter bytes sent (by `codec`)
  std::uint64_t payloads_sent = 0;       // parameter payloads sent (requests and replies)
  double last_distance = 0;           // relative model distance at the last exchange
  std::uint64_t robust_clipped = 0;   // received models clipped by robust mixing
  std::uint64_t robust_refused = 0;   // received models refused by robust mixing (nothing mixed)
  std::uint64_t state_served = 0;     // state transfers served (first chunk requests answered)
  std::uint64_t overlay_sent = 0;     // Overlay messages sent (partial views)
  std::uint64_t int4_absolute = 0;    // int4 exchanges (either role) that fell back to absolute int8
  // Of `exchanges`, those completed while settling in a compressed codec (codec auto on a link
  // whose bytes are its cost, the models still apart): settling counts the others only.
  std::uint64_t settle_compressed = 0;
  std::uint64_t exact_exchanges() const { return exchanges - settle_compressed; }
};

class Gossip {
 public:
  Gossip(Env& env, GossipConfig cfg, MemberDigest self, std::string fingerprint, std::span<float> params);

  // Joins through `seeds` (any live members); none: a new swarm of one.
  void start(const std::vector<PeerId>& seeds);
  // A training step finished: `clock` local steps done, `samples` processed in all.
  void on_step_done(std::uint64_t clock, std::uint64_t samples);
  // Before start(): our model already has `clock` steps and `samples` behind it (a restart
  // from a checkpoint), so that is the clock we tell from the first message on, not 0.
  void resume_clock(std::uint64_t clock, std::uint64_t samples);
  void on_message(const PeerId& from, const Message& msg);
  void on_timer(std::uint64_t id);
  void on_send_failed(const PeerId& peer, const std::string& reason);
  // Whom an exchange may go to. Any: every usable live member (training). Useful (settling,
  // a pause): only those it can change a model with: a member whose clock moved since our last
  // exchange with it (it trained), whose last exchange with us found the models apart
  // (distance >= kAgreeDistance) or came before our own model last changed, or that we have
  // not exchanged with yet. Either way members still training come first: a member that has
  // finished (MemberDigest::done), or whose last model we refused or clipped, is picked only
  // when none of the others is alive.
  // Useful: settling (useful()). Far: settling held by a far finished member (far_finished()):
  // only those, so that the members that agree do not exchange among themselves meanwhile.
  enum class Partners { Any, Useful, Far };
  // Two models closer than this (relative distance) are taken as equal.
  static constexpr double kAgreeDistance = 1e-6;
  // Not training (waiting on the staleness bound, or settling after training): start an
  // exchange if a slot is free (and `exchange` says so), whatever H says, and probe the
  // slowest members so their clocks reach us. True if an exchange was started.
  bool on_idle(bool exchange = true, Partners partners = Partners::Any);
  // Training is over for good in this incarnation (settling, leaving, or the end): our digest
  // says so from now on.
  void set_done() {
    if (!view_.self().done) done_version_ = model_version_;
    view_.self().done = true;
    outer_.end();  // settling is plain averaging
  }
  // Training begins (PeerLoop, after the state wait): the outer optimizer's anchor is the
  // model now (core/outer.hpp). A no-op with outer momentum off.
  void begin_outer() { outer_.begin(params_); }
  // Training pauses (PeerLoop::pause: the Python module's serve(), which settles between or
  // after a user's training steps) or resumes. While paused, mixes are plain averaging, as
  // settling after set_done is: there is no local progress, and the momentum left over would
  // otherwise move the model at every mix on its own (core/outer.hpp), 6 times its velocity in
  // all with momentum 0.9: Python peers at --local-steps 64 with outer momentum lost 2.5 points
  // in the 3 s settle at the end of training. The anchor still follows each mix, so once
  // training resumes the next outer step sees only the local progress made after the pause.
  void pause_outer(bool paused) { outer_paused_ = paused; }
  bool outer_paused() const { return outer_paused_; }
  const OuterOptimizer& outer() const { return outer_; }
  bool done() const { return view_.self().done; }
  // A member `useful` to exchange with as Partners::Useful says (it need not be usable now).
  bool useful(const Member& m) const;
  // Some live member is useful, or one is still training.
  bool anyone_useful() const;
  // An alive member that has finished training, and whose last exchange with us, completed
  // after we finished too, found the models cfg.settle_far_distance apart or more. PeerLoop
  // settles on while there is one (up to its deadline), so that a peer behind a slow link,
  // whose exchanges take longest, is not left with a model of its own when the others agree
  // among themselves and leave (testbed S4: its final accuracy up to 2 points lower).
  bool far_finished_member() const;
  bool far_finished(const Member& m) const;
  bool partner_fits(const Member& m, Partners partners) const;
  // The slowest step time among the alive members still training, as their clocks' advance
  // shows it (0: none known): settling exchanges no faster than H of those.
  double slowest_training_step() const;
  // H now: cfg.local_steps, or with local_steps = 0 (auto) the measured choice
  // (GossipConfig::exchange_share); 1 until a round trip and two steps have been timed.
  std::uint64_t local_steps_now() const { return cfg_.local_steps ? cfg_.local_steps : auto_local_steps_; }
  // H or the codec is chosen by the peer (local_steps = 0 or codec auto), whose budget then
  // reads Env::cpu(): a front end whose CPU clocks cost something to keep need not keep them
  // otherwise.
  bool uses_cpu_clocks() const { return auto_timing(); }
  // The codec in use (the eval lines' `codec`): cfg.codec, or with codec = Auto the codec of
  // the last exchange we started (before any, none).
  PayloadCodec codec_now() const { return cfg_.codec != PayloadCodec::Auto ? cfg_.codec : last_codec_; }
  // The codec of the next exchange we start with `peer`: cfg.codec, or with codec = Auto the
  // choice from our round trips with that peer (a link is as slow as its slower end: one peer
  // on a home connection must not make the others compress to each other, nor they send it
  // float32), or where we have timed none with it, the lightest codec (its first round trip
  // costs little on any link: note_round_trip then tells that link from our others). While
  // settling (training done, or a pause: the Python module's serve()) float32, unless the
  // link's round trips grow with the bytes (CodecLinks::settle_codec).
  PayloadCodec codec_for(const PeerId& peer) const;
  // The swarm's samples as far as we know: ours and every member's we have heard of
  // (View::others_samples). The swarm-wide budget (LoopSettings::swarm_samples) stops on it.
  std::uint64_t swarm_samples() const { return samples_ + view_.others_samples(); }
  // How many times our model has changed: steps, and mixes that found the models apart.
  std::uint64_t model_version() const { return model_version_; }

  // Staleness: may the next step start? slowest_clock(): smallest clock of the other alive
  // members still training (not done) that we know of (our own clock when there are none).
  bool may_step() const;
  std::uint64_t slowest_clock() const;

  // Joining: true once the model and step came from a member (or no transfer is needed, or it
  // was given up). Until then we neither start nor answer exchanges.
  bool state_ready() const { return state_ready_; }
  std::optional<std::uint64_t> adopted_step() const { return adopted_step_; }
  // Extra state: an opaque blob beside the model that a joiner receives after the parameters
  // of the same snapshot (GossipConfig::fetch_extra_state) and that is never averaged (the
  // Python module's optimizer state). The source sends the blob it was last given when the
  // joiner's first request came; null: none. The joiner's copy is in received_extra_state()
  // (null if the source had none, or one larger than max_extra_state_bytes()).
  void set_extra_state(std::shared_ptr<const Bytes> blob) { extra_state_ = std::move(blob); }
  const std::shared_ptr<const Bytes>& received_extra_state() const { return received_extra_; }
  std::uint64_t max_extra_state_bytes() const { return 8 * params_.size() * sizeof(float) + (1u << 20); }
  // Graceful leave: announce, hand our model to a live neighbour, then left() turns true (on
  // its LeaveAck, or when nobody could take it). Without `handover` (a peer that finished and
  // settled: its model is the swarm's) it only announces, and left() is true at once.
  void leave(bool handover = true);
  bool left() const { return left_; }
  // leave() was called: from now on requests get a busy reply ("leaving") and nothing is mixed.
  bool leaving() const { return leaving_; }
  const View& view() const { return view_; }
  const GossipStats& stats() const { return stats_; }
  bool joined() const { return joined_; }
  // Joining through seeds (GossipConfig::join_timeout_s): true while no seed has answered, no
  // member has reached us, and the deadline has not passed; a driver waits while it holds.
  bool joining() const;
  // The deadline passed with nobody answering and we are not a founder: give up (exit).
  bool join_failed() const { return join_failed_; }
  // "could not join through A,B within N s: A: <last error>; B: no answer" (when join_failed()).
  std::string join_failure() const;
  // The deadline passed alone, and we are in our own seed list: we started the swarm.
  bool founded() const { return founded_; }
  std::size_t exchanges_in_flight() const { return out_.size(); }
  // The exchanges we started and have not finished, read-only (the simulator's invariant
  // checks: tests/sim/test_invariants.cpp). `reply`: the responder's reply as far as it has
  // arrived, held until its ExchangeAccept arrives.
  struct OpenExchange {
    PeerId peer;
    std::uint64_t id = 0;
    double weight = 1;                    // ours, a
    Pieces snapshot;                      // x̂_s as the responder received it
    bool accepted = false;                // the responder said it mixed x_s
    bool streamed = false;                // streamed form (the responder mixes on x_s, then accepts);
                                          // else one-shot (it mixed as it replied)
    std::vector<const Message*> reply;    // the reply's messages (chunks) received so far
    std::size_t lo = 0;                   // the fragment's first parameter: snapshot[i] is parameter lo + i
  };
  std::vector<OpenExchange> open_exchanges() const;
  // The int4 codec's per-partner references (core/codec_refs.hpp).
  const CodecRefs& codec_refs() const { return refs_; }
  // Fragments the model is cut into (GossipConfig::fragments, at most the parameter count).
  std::uint32_t fragments() const { return fragments_; }
  const GossipConfig& config() const { return cfg_; }
  // Partial views (core/gossip_overlay.cpp): whether this peer runs them, and its views (null
  // while it runs full views).
  bool partial() const { return overlay_ != nullptr; }
  const Overlay* overlay() const { return overlay_.get(); }
  // Joiners' snapshots this peer holds now (state transfers it is serving).
  std::size_t transfers_serving() const { return snapshots_.size(); }

 private:
  // A snapshot of ours as sent: its payloads (several chunks for codec none and a large
  // model, else one) and, for a lossy codec, what the receiver decodes from it.
  struct SentSnapshot {
    std::vector<std::shared_ptr<const Bytes>> chunks;
    std::vector<float> decoded;  // x̂_s = decode(payload); empty for codec none
    Pieces view() const;
    std::size_t bytes() const;
  };
  // A snapshot of theirs as it arrives (codec none: in chunks, in order, each checked as it
  // landed; other codecs: the one message), kept as received: no reassembly copy.
  struct ReceivedSnapshot {
    std::vector<Message> chunks;
    std::uint64_t floats = 0;  // parameters in `chunks` (codec none)
    // Keeps the chunk `h` heads if it is the next one; false if it is not (one went missing).
    bool add(const Message& msg, const ExchangeMsg& h);
    Pieces view() const;
  };
  struct Outstanding {
    std::uint64_t id;
    PeerId peer;
    SentSnapshot snap;                      // x_s as encoded and sent
    double weight;
    double started;
    std::vector<std::uint32_t> sparse_idx;  // topk: the coordinates S of this exchange
    bool streamed = false;                  // payload sent apart: wait for ExchangeAccept
    bool accepted = false;                  // the responder mixed x_s
    ReceivedSnapshot reply = {};            // y_s so far, held until complete and accepted
    bool reply_complete = false;
    std::uint32_t fragment = 0;             // the range this exchange averages
    PayloadCodec codec = PayloadCodec::None;  // both ways (codec_now() when it started)
    // int4: reply-first (x_s goes once the reply says how to encode it), ŷ_s as decoded.
    bool absolute = false;
    std::vector<float> reply_decoded;
    double deadline = 0;                    // given up at this time: arm_deadline()
  };
  enum TimerKind : std::uint64_t {
    kExchangeDeadline = 1, kJoinRetry = 2, kSuspectCheck = 3, kProbe = 4, kProbeTimeout = 5,
    kProbeIndirect = 6, kStateTimeout = 7, kLeaveTimeout = 8, kIncomingDeadline = 9, kJoinDeadline = 10,
    kShuffle = 11, kOverlayState = 12
  };
  static std::uint64_t timer_id(TimerKind k, std::uint64_t seq) { return (std::uint64_t(k) << 56) | seq; }

  // Starts an exchange with a partner as `partners` says; false if none is usable.
  bool start_exchange(Partners partners = Partners::Any);
  // An exchange with `peer` mixed (either role; stats_.last_distance holds its distance):
  // remember it for Partners::Useful.
  // With fragments, `fragment` is the range it mixed: the member counts as agreeing with us
  // (not Partners::Useful) only once every fragment was found equal with neither model changed.
  void mixed_with(const PeerId& peer, std::uint64_t their_clock, std::uint32_t fragment = 0);
  // A mix is about to land on params_: outer momentum's step first (core/outer.hpp; a no-op
  // when it is off or training is over: set_done ends it).
  // With fragments, on that range only (Streaming DiLoCo: each fragment's outer step works on
  // its own local progress since that fragment was last mixed).
  void outer_step(std::uint32_t fragment = 0) {
    if (outer_paused_) return;
    const std::uint64_t lo = ExchangeMsg::fragment_lo(params_.size(), fragment, fragments_);
    outer_.step(params_, lo, ExchangeMsg::fragment_lo(params_.size(), fragment + 1, fragments_) - lo);
  }
  // Gives up exchange `it` (nothing mixed on our side). `peer_busy`: the peer answered (it is
  // healthy), so the failure is not held against it.
  void fail_exchange(std::size_t index, const std::string& reason, bool peer_busy);
  // The peer declined exchange `it` as the protocol says it should (stats().declined).
  void decline_exchange(std::size_t index, const std::string& reason);
  // A failed exchange or probe: skip the peer for a while, suspect it after several in a row.
  void note_failure(const PeerId& peer);
  // Index in out_ of the exchange with `peer` (and id, if given), or npos.
  std::size_t find_out(const PeerId& peer, std::optional<std::uint64_t> id = std::nullopt) const;
  // A streamed exchange that `peer` started is still open here (we replied, x_s is on its way).
  bool answering(const PeerId& peer) const;
  void on_exchange_request(const PeerId& from, const Message& msg);
  void on_exchange_reply(const PeerId& from, const Message& msg);
  // The initiator's side once the whole reply (and, streamed, the accept) is in: check,
  // screen, mix out_[index].
  void complete_exchange(std::size_t index);
  // Codec none: checks one message of a snapshot in chunks (sizes, offset, finiteness);
  // returns the problem, or empty. `out`: its floats.
  std::string check_chunk(const Message& msg, const ExchangeMsg& h, std::span<const float>& out) const;
  // Our snapshot for `type` (ExchangeRequest/Payload/Reply) with header `h`: copied, hashed
  // and sent to `to` chunk by chunk (h.codec none; one message when `one_message`), or encoded
  // and sent whole (lossy codecs).
  SentSnapshot send_snapshot(const PeerId& to, MsgType type, ExchangeMsg h, bool one_message);
  void on_exchange_payload(const PeerId& from, const Message& msg);
  void on_exchange_accept(const PeerId& from, const Message& msg);
  // Checks of an exchange header that need no payload; returns the problem, or empty.
  std::string check_exchange_header(const ExchangeMsg& h) const;
  std::string fragments_problem(const ExchangeMsg& h) const;
  void on_busy(const PeerId& from, const Message& msg);
  void on_join_request(const PeerId& from, const Message& msg);
  void on_join_reply(const PeerId& from, const Message& msg);
  void on_ping(const PeerId& from, const Message& msg);
  // Membership (gossip_membership.cpp).
  void on_ping_req(const PeerId& from, const Message& msg);
  void on_state_request(const PeerId& from, const Message& msg);
  void on_state_chunk(const PeerId& from, const Message& msg);
  void on_leave(const PeerId& from, const Message& msg);
  void on_leave_ack(const PeerId& from, const Message& msg);
  // Partial views (gossip_overlay.cpp).
  void on_overlay(const PeerId& from, const Message& msg);
  void overlay_send(const PeerId& to, OverlayMsg m);
  // Switches to partial views if the mode and the view's size say so.
  void maybe_go_partial(std::uint64_t size_hint = 0);
  void go_partial(std::uint64_t size_hint);
  // The seed's side of a join in partial views: link the joiner, start its random walks.
  void overlay_join(const PeerId& joiner);
  // Takes a member into View and the passive view (unless it is known dead or is ourselves).
  void overlay_learn(const MemberDigest& d);
  // The same, for a caller that has just looked d.id up (`known`: what find returned) and
  // checked that it is not ourselves, with partial views on (merge_view); `hash` is
  // View::hash_of(d.id).
  void overlay_learn(const MemberDigest& d, Member* known, std::size_t hash);
  // Links a member into the active view (sending Disconnect to one it drops).
  void overlay_link(const PeerId& id);
  // Sends Neighbor requests to passive members until active + pending reach the capacity.
  void overlay_fill();
  // A member changed state or failed: repair the active view at once.
  void overlay_lost(const PeerId& id, bool dead);
  void overlay_shuffle();
  // Erases from View the members in no view and no exchange (bounded memory); one of them.
  void overlay_trim();
  void overlay_forget(const PeerId& id);
  void overlay_forget(const PeerId& id, std::size_t hash);
  // `hash`: View::hash_of(id).
  bool overlay_in_use(const PeerId& id, const Member& m, std::size_t hash) const;
  void overlay_accept_sample(const std::vector<MemberDigest>& sample);
  std::vector<MemberDigest> overlay_sample(bool with_active);
  // The exchange partner in partial views: an active member, every fresh_every-th a passive one.
  std::optional<PeerId> overlay_partner(Partners partners);
  // A joiner's state-transfer source in partial views: an active member that said it has a
  // model (empty: none known).
  PeerId overlay_state_source();
  bool is_seed(const PeerId& id) const;
  void probe();
  void ping_dead();
  void on_probe_timer(TimerKind kind, std::uint64_t seq);
  void start_state_transfer(const PeerId& source);
  void request_state_chunk();
  void on_state_timeout(std::uint64_t transfer_id);
  void send_leave(const PeerId& to);
  void schedule_suspicion(const PeerId& peer);
  // topk codec (gossip_sparse.cpp).
  std::shared_ptr<const Bytes> sparse_request(std::vector<std::uint32_t>& idx);
  void sparse_respond(const PeerId& from, const Message& msg, const ExchangeMsg& h);
  void sparse_finish(const PeerId& from, const Message& msg, const ExchangeMsg& h, Outstanding o);
  // A buffer of n bytes for a snapshot chunk: a pooled one that nobody else holds any more
  // (already faulted in: a fresh 100 MB buffer costs more in page faults and zeroing than its
  // transfer), else a new one, kept in the pool if there is room (the chunks of max_in_flight
  // + 1 snapshots: the open exchanges' and one reply being written).
  std::shared_ptr<Bytes> snapshot_buffer(std::size_t n);
  std::uint64_t chunk_floats() const;  // floats per snapshot chunk (codec none)
  std::vector<std::shared_ptr<Bytes>> snapshot_pool_;
  // Decodes a payload; returns the problem, or empty.
  std::string decode_payload(const Message& msg, const ExchangeMsg& h, std::vector<float>& scratch,
                             std::span<const float>& out) const;
  void send_join_requests();
  void on_join_deadline();
  void reject(const PeerId& from, const std::string& reason);
  // Merges a piggybacked view; handles news about ourselves (refutation).
  void merge_view(const std::vector<MemberDigest>& digests);
  void report_change(const View::Change& c);
  // On a member's own Leave: the exchange we started with it and it has not accepted, given up.
  void give_up_on_leaver(const PeerId& leaver);
  void heard_from(const PeerId& peer);
  // We (the responder) mixed `from`'s model: count it and report it with the last distance.
  void responder_done(const PeerId& from, std::uint64_t their_clock, std::uint32_t fragment, PayloadCodec codec);
  // The header of an exchange message of ours: id, our clock, `weight`, codec, size, a view digest.
  ExchangeMsg our_exchange_header(std::uint64_t exchange_id, double weight, std::uint32_t fragment, PayloadCodec codec);
  double my_weight() const;
  // Full views piggyback a random digest_limit of the members (everyone holds everyone, so
  // every entry is news to somebody). Partial views piggyback ours, 2 of the most recent
  // changes (SWIM's dissemination) and a sample of 3 (the receiver keeps up to 2 it did not
  // know as passive candidates, as Cyclon's exchanges would; the third is a spare for a member
  // it knows): a receiver holds almost none of the members of a larger random sample, and
  // drawing, encoding and looking them up was a third of the simulator's time at 1,000 peers
  // (docs/sim.md, "Partial views").
  static constexpr std::size_t kDigestNews = 2, kDigestSample = 3;
  std::vector<MemberDigest> digest() {
    if (overlay_) return view_.digest_partial(cfg_.digest_limit, kDigestNews, kDigestSample, env_.rng());
    return view_.digest(cfg_.digest_limit, env_.rng());
  }
  ProtocolEvent ev(ProtocolEvent::Kind k, const PeerId& peer, std::string reason = {}) const;

  Env& env_;
  GossipConfig cfg_;
  View view_;
  std::string fingerprint_;
  std::span<float> params_;
  std::vector<PeerId> seeds_;
  double join_retry_gap_ = 0;  // the next resend's gap (kJoinRetry)
  bool joined_ = true;
  // Joining with a deadline (gossip_join.cpp).
  bool self_seeded_ = false;     // we were in our own seed list: a founder
  bool join_deadline_passed_ = false, join_failed_ = false, founded_ = false;
  std::map<PeerId, std::string> join_errors_;  // seed -> last send failure while joining
  std::uint64_t clock_ = 0, samples_ = 0;
  std::uint64_t model_version_ = 0;
  std::uint64_t done_version_ = 0;  // model_version_ when set_done() was first called
  std::uint64_t steps_since_exchange_ = 0;
  // --local-steps auto and --codec auto: the time per step (step_seconds()), and our last
  // exchanges' round trips (their minimum, the link's own cost: one that waited out a
  // partner's evaluation or loading does not set H). With codec auto, one window per codec of
  // kAutoCodecs; a window not added to in kRttFresh round trips is stale (the link may have
  // changed since): its codec's round trip is then scaled from the current codec's by bytes,
  // and it starts afresh with its next one. With a fixed codec, window 0 takes them all.
  struct RttWindow {
    std::array<double, 4> rtt{};
    std::uint64_t count = 0;  // round trips it holds, up to 4
    std::uint64_t last = 0;   // its CodecLinks::count when it was last added to
    bool borrowed = false;    // a partner's, copied from all_links_ (replaced by its first own)
    double min() const;
  };
  static constexpr std::uint64_t kRttFresh = 16;
  using RttWindows = std::array<RttWindow, std::size(kAutoCodecs)>;
  // Our round trips over one set of links (all of ours, or those with one partner), by codec
  // with codec auto (window 0 takes them all with a fixed codec), and the codec they choose.
  // The codecs with more bytes than the current one are tried again, as if the link's cost
  // were its latency, once `retry_at` round trips are counted (choose_codec): a first round
  // trip that waited on a busy partner, or a link that got faster, is found out. Each retry
  // that finds the heavier codec no better doubles the gap to the next (kRetryFirst to
  // kRetryMax), so a slow link pays a float32 round trip rarely. A new link starts in the
  // lightest codec (codec_for); where it has no heavier codec to borrow, it is retried once
  // the peer has kRetryNew round trips in all (one new link per kRttFresh of them:
  // new_link_probe_at_), and one found faster than the links it borrowed from after
  // kRetryNew of its own: a link whose cost is its latency goes float32 after a few
  // exchanges, not 64.
  static constexpr std::uint64_t kRetryFirst = 64, kRetryMax = 1024, kRetryNew = 2;
  struct CodecLinks {
    RttWindows windows{};
    std::uint64_t count = 0;  // round trips added
    std::uint64_t retry_at = kRetryFirst, retry_gap = kRetryFirst;
    bool retrying = false;  // a retry chose the codec of the next round trip
    std::uint8_t retry_from = 0;  // the retry's slot before it (kAutoCodecs)
    bool probe_new = false; // its first retry (kRetryNew) is still to come (note_round_trip)
    bool chosen = false;    // codec is a choice (it takes a timed step as well)
    PayloadCodec codec = PayloadCodec::None;
    PayloadCodec settle_codec = PayloadCodec::None;  // while settling (choose_codec)
    // Window k holds a round trip added within the last kRttFresh of this set's.
    bool fresh(std::size_t k) const { return windows[k].count > 0 && count - windows[k].last <= kRttFresh; }
  };
  // Codec auto, per partner (a link is as slow as its slower end): at most kPartnerLinks of
  // them, the least recently timed dropped first (a partial view's partners come and go).
  struct PartnerLink {
    CodecLinks links;
    std::uint64_t used = 0;  // all_links_.count at our last round trip with it
  };
  static constexpr std::size_t kPartnerLinks = 64;
  std::map<PeerId, PartnerLink> partner_links_;
  // Codec auto: the lightest codec whose H is at most this times the least codec's.
  static constexpr double kCodecSlack = 1.25;
  // Codec auto while settling: float32 unless its round trip is over this times the chosen one's.
  static constexpr double kSettleSlack = 2.0;
  // ... and once an exchange with the partner found the models this close (relative distance:
  // about int8's quantisation error, below which only float32 brings them closer), float32.
  static constexpr double kSettleExactDistance = 0.02;
  // The time per step: sums of the gaps between steps, and of the steps, each decayed by
  // exp(-gap / kStepTau) (a mean over about the last kStepTau seconds, whatever the pace).
  static constexpr double kStepTau = 2.0, kPauseGap = 0.25;
  double last_step_at_ = -1, step_time_sum_ = 0, step_count_sum_ = 0;
  double step_seconds() const { return step_count_sum_ > 0 ? step_time_sum_ / step_count_sum_ : 0; }
  // With the front end's CPU clocks (Env::cpu()), over the same steps: the CPU used, all of it
  // and the protocol's part, and the exchanges completed in either role.
  double cpu_sum_ = 0, protocol_cpu_sum_ = 0, handled_sum_ = 0;
  double last_cpu_total_ = -1, last_cpu_protocol_ = 0, cpu_read_at_ = -1;
  std::uint64_t last_handled_ = 0;
  static constexpr double kCpuRead = 0.1;
  // The wall time per step of training alone: step_seconds() less the protocol's share of
  // the CPU (all of it without CPU clocks).
  double compute_seconds() const;
  // What one exchange's own CPU (either role) costs this peer in wall time: its CPU over the
  // CPU the peer gets per wall second. 0 without CPU clocks or before two exchanges.
  double exchange_cpu_seconds() const;
  CodecLinks all_links_;  // all our round trips: H, and the windows a new partner borrows (borrow_links)
  std::uint64_t new_link_probe_at_ = kRetryNew;  // all_links_.count of a new link's next probe
  bool outer_paused_ = false;  // pause_outer
  std::uint64_t auto_local_steps_ = 1;
  PayloadCodec last_codec_ = PayloadCodec::None;  // of the last exchange we started
  bool auto_timing() const { return !cfg_.local_steps || cfg_.codec == PayloadCodec::Auto; }
  bool settling_codec() const { return done() || outer_paused_; }
  // An exchange of ours with `peer` in `codec` took `seconds` from request to mix: H and the
  // codecs again.
  void note_round_trip(double seconds, PayloadCodec codec, const PeerId& peer);
  // Codec auto: `links`' choice once a round trip in `codec` was added to them (links.codec),
  // and the H it needs with `budget` seconds of exchange per step.
  double choose_codec(CodecLinks& links, PayloadCodec codec, double budget) const;
  void forget_other_links(CodecLinks& links, std::size_t slot, double seconds) const;
  void borrow_links(CodecLinks& links) const;
  // A request's codec is ours, or (codec auto) one of the codecs auto chooses from.
  bool accepts_codec(PayloadCodec c) const {
    return c == cfg_.codec || (cfg_.codec == PayloadCodec::Auto && auto_codec_choice(c));
  }
  std::uint64_t next_exchange_id_ = 1;
  std::uint64_t timer_seq_ = 0;
  // The exchange deadlines (out_'s and in_'s) share one pending timer per side, armed for the
  // earliest deadline still open and re-armed when it fires (arm_deadline(), on_deadline()):
  // an exchange that ends in milliseconds leaves no timer of its own behind, and each still
  // fails at its own deadline. (A timer per exchange was a tenth of the simulator's events.)
  struct DeadlineTimer {
    double at = -1;          // when the pending timer fires (-1: none pending)
    std::uint64_t seq = 0;   // its id: an earlier one it replaced is ignored when it fires
  };
  DeadlineTimer out_deadline_, in_deadline_;
  void arm_deadline(TimerKind kind, double deadline, double delay);
  void on_deadline(TimerKind kind, std::uint64_t seq);
  std::uint64_t ping_seq_ = 0;
  std::uint64_t dead_ping_ = 0;  // ping_dead's turn
  // SWIM probe in progress.
  struct Probe {
    std::uint64_t seq = 0;
    PeerId target;
    double started = 0;
  };
  std::optional<Probe> probe_;
  struct Relay {
    PeerId requester;
    std::uint64_t their_seq;
    PeerId target;
  };
  std::map<std::uint64_t, Relay> relays_;  // our Ping seq -> indirect probe we relay
  // State transfer, joiner side.
  bool state_ready_ = true;
  std::optional<std::uint64_t> adopted_step_;
  struct Transfer {
    std::uint64_t id = 0;
    PeerId source;
    std::uint64_t offset = 0;  // parameters fetched; in the extra part: bytes of it fetched
    int attempt = 0;
    std::vector<float> buffer;
    bool extra = false;             // the parameters are in: fetching the extra state
    std::uint64_t extra_total = 0;  // its size in the source's snapshot
    std::uint64_t step = 0;         // the source's step at that snapshot
    Bytes extra_buffer;
  };
  // The number of the chunk the transfer waits for (its deadline timer names it).
  std::uint64_t state_chunk_seq() const;
  // The whole state is in: adopt the model, the step and the extra state (if any).
  void finish_state_transfer(const PeerId& from, std::string note);
  std::optional<Transfer> transfer_;
  std::uint64_t next_transfer_id_ = 1;
  // State transfer, source side: snapshots by (joiner, transfer id), dropped after a while.
  struct Snapshot {
    std::shared_ptr<const Bytes> params;
    std::uint64_t step;
    double created;
    std::shared_ptr<const Bytes> extra;  // the extra state when the snapshot was taken
  };
  std::shared_ptr<const Bytes> extra_state_, received_extra_;
  std::map<std::pair<PeerId, std::uint64_t>, Snapshot> snapshots_;
  // Graceful leave.
  bool leaving_ = false, left_ = false;
  std::uint64_t leave_seq_ = 0;
  int leave_attempts_ = 0;
  PeerId leave_target_;
  std::vector<float> scratch_in_;  // decoded incoming payload (reused)
  // Robust mixing (gossip_exchange.cpp): dense models, and topk's coordinate subsets, which
  // have their own scale of distances.
  RobustMix robust_{cfg_.robust}, robust_sparse_{cfg_.robust};
  std::vector<float> robust_scratch_;
  // Replaces `model` by what may be mixed of it (itself, or clipped towards `ours`); false when
  // it is refused (counted and reported; with `busy_id` the request is answered ExchangeBusy).
  bool screen_model(const PeerId& from, RobustMix& robust, std::span<const float>& model, std::span<const float> ours,
                    std::optional<std::uint64_t> busy_id);
  bool screen_values(const PeerId& from, RobustMix& robust, std::vector<float>& values, std::span<const float> ours,
                     std::optional<std::uint64_t> busy_id);
  // Fragments: the effective count and the initiator's turn (its k-th exchange takes k mod F).
  std::uint32_t fragments_ = 1;
  std::uint64_t fragment_turn_ = 0;
  // The parameters of the range an exchange header names.
  std::span<float> range_of(const ExchangeMsg& h) const {
    return params_.subspan(static_cast<std::size_t>(h.range_lo()), static_cast<std::size_t>(h.range_len()));
  }
  // int4 (gossip_int4.cpp): references per partner; the initiator's reply-first steps.
  CodecRefs refs_{static_cast<std::size_t>(cfg_.int4_partners)};
  bool refs_pinned(const PeerId& peer) const { return find_out(peer) != static_cast<std::size_t>(-1) || answering(peer); }
  // The hash of our references with `peer` over h's range, we being the initiator or not; 0 if
  // we hold none for it.
  std::uint64_t int4_hash(const PeerId& peer, const ExchangeMsg& h, bool initiator);
  // Encodes our range for `peer` (Q4 of x - ref, or absolute int8) into `snap` (payload and x̂).
  void int4_encode(const PeerId& peer, const ExchangeMsg& h, bool absolute, SentSnapshot& snap);
  // Decodes their range into `out`; returns the problem, or empty.
  std::string int4_decode(const PeerId& peer, const Message& msg, const ExchangeMsg& h, bool absolute, std::vector<float>& out);
  // Both sides mixed: the references of the range are x̂ (ours) and ŷ (theirs) now.
  void int4_commit(const PeerId& peer, const ExchangeMsg& h, std::span<const float> mine, std::span<const float> theirs);
  // The initiator has the reply of an int4 exchange: decode ŷ, encode and send x_s.
  void int4_reply(std::size_t index, const Message& msg, const ExchangeMsg& h);
  std::vector<float> sparse_ref_;    // topk: each coordinate's value when it was last averaged
  std::uint64_t sparse_cursor_ = 0;  // topk: round-robin sweep position
  std::vector<Outstanding> out_;  // at most max_in_flight, distinct peers
  // Streamed exchanges we answered and whose payload has not arrived yet: one per peer, each
  // dropped (nothing mixed) after exchange_timeout_s.
  struct Incoming {
    PeerId peer;
    std::uint64_t id = 0;
    double deadline = 0;    // given up (nothing mixed) at this time: arm_deadline()
    double weight = 1;      // the initiator's weight a
    double mine_weight = 1; // ours b, as sent in the reply
    SentSnapshot mine;      // y_s as sent
    ReceivedSnapshot theirs = {};  // codec none: x_s so far
    std::uint32_t fragment = 0;    // the range the initiator chose
    PayloadCodec codec = PayloadCodec::None;  // the request's, ours too
    bool absolute = false;         // int4: our verdict, absolute int8 both ways
  };
  std::vector<Incoming> in_;
  // Per initiator: its incarnation and the newest exchange id we answered. A request at or
  // below it is a duplicate (or an old one overtaken): answering it again would mix twice
  // (the simulator's faults.duplicate found it: tests/sim/test_campaign.cpp).
  std::map<PeerId, std::pair<std::uint64_t, std::uint64_t>> answered_;
  GossipStats stats_;
  OuterOptimizer outer_{cfg_.outer};
  // Partial views (null: full views).
  std::unique_ptr<Overlay> overlay_;
  std::uint64_t size_hint_ = 0;      // the swarm's size as far as we can tell (JoinReply)
  std::uint64_t partner_draws_ = 0;  // for fresh_every
};

}  // namespace rumor
