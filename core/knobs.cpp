// The table of loop knobs (core/knobs.hpp): names, ranges and help, and the one parser of their
// values.
#include "core/knobs.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>

#include <fmt/format.h>

namespace rumor {

static_assert(std::is_same_v<std::size_t, std::uint64_t>, "Knob::Field holds size_t fields as uint64_t");

namespace {

using T = Knob::Type;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr unsigned kAll = Knob::kAll, kNoPython = Knob::kDaemon | Knob::kSim;
constexpr const char* kStop = Knob::kStopGroup;
constexpr const char* kNet = "Network and gossip";
constexpr const char* kTune = "Protocol tuning (defaults suit most runs)";
constexpr const char* kTrust = "Trust (docs/security.md)";

#define RUMOR_FIELD(expr) [](LoopSettings& s) -> Knob::Field { return &s.expr; }

const Knob kKnobs[] = {
    // When to stop. Python's loop decides that itself.
    {"epochs", "workload", T::Real, 0, 1e9, nullptr, "epochs", kStop, "Passes over this peer's shard (0: no epoch budget)",
     kNoPython,
     RUMOR_FIELD(epochs)},
    {"steps", "workload", T::Count, 0, 1e15, nullptr, "steps", kStop, "Local optimizer steps (replaces the epoch budget)",
     kNoPython, RUMOR_FIELD(steps)},
    {"duration", "workload", T::Seconds, 0, 1e9, nullptr, "s", kStop,
     "Seconds of training (replaces the epoch budget)", kNoPython, RUMOR_FIELD(duration_s)},
    {"swarm_epochs", "workload", T::Real, 0, 1e9, nullptr, "epochs", kStop,
     "Stop every peer when the swarm as a whole has processed this many passes over the whole training set "
     "(all shards; replaces the epoch budget): fast peers do more steps, all stop together",
     kNoPython, RUMOR_FIELD(swarm_epochs)},
    {"swarm_samples", "workload", T::Count, 0, 1e18, nullptr, "samples", kStop,
     "Stop every peer when the swarm as a whole has processed this many samples (replaces the epoch budget "
     "and swarm_epochs)",
     kNoPython, RUMOR_FIELD(swarm_samples)},
    {"lr_follows_peers", "workload", T::Bool, 0, 0, nullptr, "", kTune,
     "Scale the learning rate by the peers training now over the most seen (linear scaling): a peer "
     "whose neighbours finished or died does not train on alone at n peers' rate",
     kAll, RUMOR_FIELD(lr_follows_peers)},
    {"eval_every", "output", T::Count, 0, 1e15, nullptr, "steps", kStop,
     "Evaluate on the test set every STEPS local steps (0: once per epoch; always at the start and the end)",
     kNoPython, RUMOR_FIELD(eval_every), "output.eval_every_steps"},
    // The swarm.
    {"local_steps", "gossip", T::Count, 1, 1e12, nullptr, "steps", kNet,
     "Exchange parameters every H local steps; auto: H such that an exchange lasts at most a share "
     "(--exchange-share) of the compute between two (measured: the step time and the recent round trips; 1..1024)",
     kAll, RUMOR_FIELD(gossip.local_steps), nullptr, nullptr, "auto"},
    {"exchange_share", "gossip", T::Real, 0.01, 10, nullptr, "", kNet,
     "With --local-steps auto or --codec auto: the round trip of an exchange against the compute time between two", kAll,
     RUMOR_FIELD(gossip.exchange_share)},
    {"mix_weight", "gossip", T::Choice, 0, 0, "uniform|samples", "", kNet,
     "Averaging weights: uniform, or by the samples each peer has processed", kAll, RUMOR_FIELD(gossip.mix_weight)},
    {"codec", "gossip", T::Choice, 0, 0, "none|fp16|int8|int4|topk|auto", "", kNet,
     "Parameter encoding on the wire (int4: 4-bit residuals against per-partner references, error feedback; "
     "topk: sparse residuals with error feedback; auto: none, fp16 or int8 per exchange, the one whose measured "
     "round trip with that partner needs the fewest local steps between exchanges (--exchange-share); settling in "
     "float32, or where the bytes are the link's cost, compressed until the models are within 0.02; every peer "
     "must use auto)",
     kAll, RUMOR_FIELD(gossip.codec)},
    {"fragments", "gossip", T::Count, 1, 64, nullptr, "", kNet,
     "Cut the parameters into this many contiguous ranges and average one per exchange, in turn (Streaming "
     "DiLoCo): 1/FRAGMENTS of the bytes per exchange; every peer must use the same count; not with codec topk",
     kAll, RUMOR_FIELD(gossip.fragments)},
    {"codec_partners", "gossip", T::Count, 1, 4096, nullptr, "peers", kTune,
     "codec int4: keep the 4-bit references (2 x the model's size each) of at most this many partners, the "
     "least recently used dropped first (an exchange with a dropped one goes absolute int8 once)",
     kAll, RUMOR_FIELD(gossip.int4_partners)},
    {"outer_lr", "gossip", T::Real, 0.001, 10, nullptr, "", kNet,
     "Outer momentum (gossip-DiLoCo): every mix ends with a Nesterov step of this outer learning rate on the "
     "change since the last one (1 with outer_momentum 0: plain gossip; DiLoCo uses 0.7 with 0.9)",
     kAll, RUMOR_FIELD(gossip.outer.lr)},
    {"outer_momentum", "gossip", T::Real, 0, 0.999, nullptr, "", kNet,
     "Outer momentum (gossip-DiLoCo): the momentum of that outer step (0: none)", kAll,
     RUMOR_FIELD(gossip.outer.momentum)},
    {"staleness", "gossip", T::Staleness, 0, 1e15, nullptr, "steps", kNet,
     "Bounded staleness TAU: never start a step more than TAU steps ahead of the slowest live peer, never mix a "
     "model more than TAU steps apart; 0 = lockstep, inf = fully asynchronous",
     kAll, RUMOR_FIELD(gossip.staleness)},
    {"exchange_timeout", "gossip", T::Seconds, 0.01, 3600, nullptr, "s", kNet,
     "Seconds an exchange may take before it is given up", kAll, RUMOR_FIELD(gossip.exchange_timeout_s)},
    {"join_timeout", "gossip", T::Seconds, 0.01, kInf, nullptr, "s", kNet,
     "Keep retrying the join list (every --join-retry) this long for a member to answer, then exit 1; a peer "
     "listed in its own join list starts the swarm instead",
     kNoPython, RUMOR_FIELD(gossip.join_timeout_s)},
    {"min_peers", "run", T::Count, 1, 100000, nullptr, "peers", kNet,
     "Start training only when this many peers (this one included) are in the view (peers starting a swarm "
     "together share their initialisation: no state transfer)",
     kAll, RUMOR_FIELD(min_peers)},
    {"min_peers_timeout", "run", T::Seconds, 0, 86400, nullptr, "s", kNet,
     "Train anyway after waiting this long for min_peers", kAll, RUMOR_FIELD(min_peers_timeout_s)},
    {"settle", "run", T::Seconds, 0, 3600, nullptr, "s", kNet,
     "After training, keep averaging with neighbours (no training) for up to SEC seconds, so the peers finish "
     "close to the swarm's average model; 0 disables",
     kAll, RUMOR_FIELD(settle_s)},
    {"settle_max", "run", T::Seconds, 0, 86400, nullptr, "s", kNet,
     "While a peer in the view is still training (behind our step count), settle up to SEC seconds, so the last "
     "to finish still has neighbours to average with",
     kAll, RUMOR_FIELD(settle_max_s)},
    {"settle_interval_max", "run", T::Seconds, 0, 3600, nullptr, "s", kTune,
     "Settling starts exchanges only with peers it can change a model with, no faster than the slowest "
     "training peer's H steps; while peers still train, or once the models agree, the interval grows 4-fold after "
     "each, up to SEC seconds",
     kAll, RUMOR_FIELD(settle_interval_max_s)},
    {"settle_far", "gossip", T::Real, 0, 10, nullptr, "", kTune,
     "Settling goes on (up to --settle) while a finished peer was this far from us (relative distance) at our last "
     "exchange since we finished, and exchanges with such peers only, so that one behind a slow link is not left "
     "with its own model; 0 disables",
     kAll, RUMOR_FIELD(gossip.settle_far_distance)},
    {"suspect_timeout", "gossip", T::Seconds, 0.01, 3600, nullptr, "s", kNet,
     "Seconds a suspected peer has to refute before it is declared dead", kAll, RUMOR_FIELD(gossip.suspect_timeout_s)},
    {"probe_interval", "gossip", T::Seconds, 0.01, 60, nullptr, "s", kNet,
     "SWIM failure detector period: a silent peer is probed, then suspected, then dead after suspect_timeout", kAll,
     RUMOR_FIELD(gossip.probe_interval_s)},
    {"view", "gossip", T::Choice, 0, 0, "full|partial|auto", "", kNet,
     "Membership views: full (every member), partial (bounded active and passive views, HyParView), or auto "
     "(full up to view_threshold members, then partial)",
     kAll, RUMOR_FIELD(gossip.view)},
    {"view_threshold", "gossip", T::Count, 1, 1e9, nullptr, "members", kNet,
     "With view auto: switch to partial views above this many members", kAll, RUMOR_FIELD(gossip.view_threshold)},
    {"active_view", "gossip", T::Count, 0, 10000, nullptr, "members", kNet,
     "Partial views: members exchanged with and probed (0: log2(n) + 1, at least 4)", kAll,
     RUMOR_FIELD(gossip.active_view)},
    {"passive_view", "gossip", T::Count, 0, 100000, nullptr, "members", kNet,
     "Partial views: candidates the active view is repaired from (0: 6 x active_view)", kAll,
     RUMOR_FIELD(gossip.passive_view)},
    // Tuning.
    {"shuffle_interval", "gossip", T::Seconds, 0.01, 3600, nullptr, "s", kTune,
     "Partial views: seconds between shuffles that refresh the passive view", kAll,
     RUMOR_FIELD(gossip.shuffle_interval_s)},
    {"fresh_every", "gossip", T::Count, 0, 1000, nullptr, "", kTune,
     "Partial views: every k-th exchange partner comes from the passive view, a fresh random sample of the swarm "
     "(0: never)",
     kAll, RUMOR_FIELD(gossip.fresh_every)},
    {"probe_timeout", "gossip", T::Seconds, 0.001, 60, nullptr, "s", kTune,
     "Seconds a SWIM ping has before indirect probes (default: min(0.25, probe_interval / 2))", kAll,
     RUMOR_FIELD(gossip.probe_timeout_s), nullptr, "auto"},
    {"max_in_flight", "gossip", T::Count, 1, 2, nullptr, "", kTune,
     "Exchanges this peer may have open at once (1 or 2; core/gossip.hpp says why not more)", kAll,
     RUMOR_FIELD(gossip.max_in_flight)},
    {"stream_exchanges", "gossip", T::Bool, 0, 0, nullptr, "", kTune,
     "Send the request header before the parameters, so the reply travels meanwhile (false: one-shot exchanges)",
     kAll, RUMOR_FIELD(gossip.stream_exchanges)},
    {"topk_fraction", "gossip", T::Real, 1e-6, 1, nullptr, "", kTune,
     "codec topk: fraction of the coordinates averaged per exchange", kAll, RUMOR_FIELD(gossip.topk_fraction)},
    {"outer_nesterov", "gossip", T::Bool, 0, 0, nullptr, "", kTune,
     "Outer momentum: Nesterov's form (false: heavy ball)", kAll, RUMOR_FIELD(gossip.outer.nesterov)},
    {"failure_backoff", "gossip", T::Seconds, 0, 3600, nullptr, "s", kTune,
     "Skip a peer whose exchange failed for SEC x failures (capped at 8x)", kAll, RUMOR_FIELD(gossip.failure_backoff_s)},
    {"suspect_after", "gossip", T::Count, 1, 1000, nullptr, "failures", kTune,
     "Suspect a peer after this many failed exchanges in a row", kAll, RUMOR_FIELD(gossip.suspect_after_failures)},
    {"join_retry", "gossip", T::Seconds, 0.01, 600, nullptr, "s", kTune,
     "Longest gap between join requests to the join list until one answers (the first resend after 50 ms, each gap doubling up to this)", kAll, RUMOR_FIELD(gossip.join_retry_s)},
    {"digest_limit", "gossip", T::Count, 1, 100000, nullptr, "members", kTune,
     "Members piggybacked on every message (membership gossip; partial views send 6 at most: their own, 2 recent changes, 3 sampled)", kAll, RUMOR_FIELD(gossip.digest_limit)},
    {"state_timeout", "gossip", T::Seconds, 0.01, 3600, nullptr, "s", kTune,
     "Seconds a state-transfer chunk may take before another member is asked", kAll,
     RUMOR_FIELD(gossip.state_timeout_s)},
    {"leave_timeout", "gossip", T::Seconds, 0.01, 3600, nullptr, "s", kTune,
     "Seconds a leaving peer waits for one member to take its model before trying another", kAll,
     RUMOR_FIELD(gossip.leave_timeout_s)},
    {"state_wait", "gossip", T::Seconds, 0, 86400, nullptr, "s", kTune,
     "A joiner that has not received the swarm's model after SEC seconds trains from its own initialisation",
     kNoPython, RUMOR_FIELD(state_wait_s)},
    {"leave_wait", "gossip", T::Seconds, 0, 3600, nullptr, "s", kTune,
     "On a graceful leave, exit after SEC seconds even if no member took the model", kAll, RUMOR_FIELD(leave_wait_s)},
    // Trust.
    {"robust", "gossip", T::Bool, 0, 0, nullptr, "", kTrust,
     "Robust mixing: a neighbour's model far beyond the distances the swarm has been showing is clipped, or "
     "refused (non-finite parameters are always refused)",
     kAll, RUMOR_FIELD(gossip.robust.enabled)},
    {"robust_clip", "gossip", T::Real, 1, 1e6, nullptr, "distances", kTrust,
     "With robust: clip beyond this many typical distances", kAll, RUMOR_FIELD(gossip.robust.clip_factor)},
    {"robust_refuse", "gossip", T::Real, 0, 1e12, nullptr, "distances", kTrust,
     "With robust: refuse beyond this many typical distances (0: never refuse, only clip)", kAll,
     RUMOR_FIELD(gossip.robust.refuse_factor)},
};

#undef RUMOR_FIELD

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A number followed by the rest of the text (a unit), or KnobError.
double leading_number(std::string_view text, std::string_view* rest) {
  text = trim(text);
  double x = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc() || p == text.data()) throw KnobError(fmt::format("expected a number, got '{}'", text));
  *rest = trim(std::string_view(p, static_cast<std::size_t>(text.data() + text.size() - p)));
  return x;
}

double plain_number(std::string_view text) {
  std::string_view rest;
  const double x = leading_number(text, &rest);
  if (!rest.empty()) throw KnobError(fmt::format("expected a plain number, got '{}'", trim(text)));
  return x;
}

std::string number_text(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  return fmt::format("{:g}", x);
}

void check_range(const Knob& k, double x, std::string_view text) {
  if (std::isnan(x) || x < k.min || x > k.max)
    throw KnobError(fmt::format("'{}' is out of range (expected {})", trim(text), knob_range(k)));
}

bool parse_bool(std::string_view text) {
  const std::string_view t = trim(text);
  for (const char* y : {"true", "1", "yes", "on"})
    if (t == y) return true;
  for (const char* n : {"false", "0", "no", "off"})
    if (t == n) return false;
  throw KnobError(fmt::format("expected true or false, got '{}'", t));
}

// The index of `text` among "a|b|c", or KnobError listing them.
int choice_index(const Knob& k, std::string_view text) {
  const std::string_view t = trim(text), all = k.choices;
  int i = 0;
  for (std::size_t b = 0;; ++i) {
    const std::size_t e = std::min(all.find('|', b), all.size());
    if (all.substr(b, e - b) == t) return i;
    if (e == all.size()) break;
    b = e + 1;
  }
  std::string list(all);
  std::replace(list.begin(), list.end(), '|', ',');
  throw KnobError(fmt::format("'{}' is not one of {}", t, list));
}

std::string choice_text(const Knob& k, int index) {
  std::string_view all = k.choices;
  for (int i = 0; i < index; ++i) all.remove_prefix(all.find('|') + 1);
  return std::string(all.substr(0, all.find('|')));
}

}  // namespace

std::span<const Knob> loop_knobs() { return kKnobs; }

const Knob* find_knob(std::string_view name) {
  for (const Knob& k : kKnobs)
    if (name == k.name) return &k;
  return nullptr;
}

double parse_seconds(std::string_view text) {
  std::string_view unit;
  double x = leading_number(text, &unit);
  if (unit.empty() || unit == "s") {
  } else if (unit == "ms") {
    x *= 1e-3;
  } else if (unit == "us") {
    x *= 1e-6;
  } else if (unit == "min") {
    x *= 60;
  } else if (unit == "h") {
    x *= 3600;
  } else {
    throw KnobError(fmt::format("unknown time unit '{}' (use s, ms, us, min or h)", unit));
  }
  if (x < 0) throw KnobError(fmt::format("a duration cannot be negative, got '{}'", trim(text)));
  return x;
}

void set_knob(const Knob& k, LoopSettings& s, std::string_view value) {
  const Knob::Field f = k.field(s);
  switch (k.type) {
    case T::Count: {
      if (k.zero_word && trim(value) == k.zero_word) {
        if (auto* u = std::get_if<std::uint64_t*>(&f)) **u = 0;
        else **std::get_if<int*>(&f) = 0;
        return;
      }
      const double x = plain_number(value);
      if (x != std::floor(x)) throw KnobError(fmt::format("expected a whole number, got '{}'", trim(value)));
      check_range(k, x, value);
      if (auto* u = std::get_if<std::uint64_t*>(&f)) **u = static_cast<std::uint64_t>(x);
      else **std::get_if<int*>(&f) = static_cast<int>(x);
      return;
    }
    case T::Real:
    case T::Seconds: {
      const double x = k.type == T::Seconds ? parse_seconds(value) : plain_number(value);
      check_range(k, x, value);
      *std::get<double*>(f) = x;
      return;
    }
    case T::Staleness: {
      const std::string_view t = trim(value);
      if (t == "inf" || t == "infinity") {
        *std::get<double*>(f) = kInf;
        return;
      }
      const double x = plain_number(t);
      if (!(x >= 0) || !std::isfinite(x) || x != std::floor(x))
        throw KnobError(fmt::format("expected a whole number of steps >= 0, or inf, got '{}'", t));
      *std::get<double*>(f) = x;
      return;
    }
    case T::Bool:
      *std::get<bool*>(f) = parse_bool(value);
      return;
    case T::Choice: {
      const int i = choice_index(k, value);
      if (auto* m = std::get_if<MixWeight*>(&f)) **m = static_cast<MixWeight>(i);
      else if (auto* v = std::get_if<ViewMode*>(&f)) **v = static_cast<ViewMode>(i);
      else *std::get<PayloadCodec*>(f) = parse_codec(choice_text(k, i));
      return;
    }
  }
}

std::string knob_value(const Knob& k, const LoopSettings& s) {
  const Knob::Field f = k.field(const_cast<LoopSettings&>(s));  // read only
  if (auto* d = std::get_if<double*>(&f)) return number_text(**d);
  if (k.zero_word) {
    if (auto* u = std::get_if<std::uint64_t*>(&f); u && **u == 0) return k.zero_word;
    if (auto* i = std::get_if<int*>(&f); i && **i == 0) return k.zero_word;
  }
  if (auto* u = std::get_if<std::uint64_t*>(&f)) return std::to_string(**u);
  if (auto* i = std::get_if<int*>(&f)) return std::to_string(**i);
  if (auto* b = std::get_if<bool*>(&f)) return **b ? "true" : "false";
  if (auto* m = std::get_if<MixWeight*>(&f)) return choice_text(k, static_cast<int>(**m));
  if (auto* v = std::get_if<ViewMode*>(&f)) return choice_text(k, static_cast<int>(**v));
  return codec_name(**std::get_if<PayloadCodec*>(&f));
}

std::string knob_conflicts(const LoopSettings& s) {
  if (s.gossip.codec == PayloadCodec::TopK && s.gossip.fragments > 1)
    return "codec topk does not combine with fragments > 1 (topk already averages a subset of the coordinates "
           "per exchange); use one or the other";
  return {};
}

std::string knob_flag(const Knob& k) {
  std::string f = std::string("--") + k.name;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

std::string knob_key(const Knob& k) { return std::string(k.section) + "." + k.name; }

std::string knob_range(const Knob& k) {
  switch (k.type) {
    case T::Bool: return "true|false";
    case T::Choice: return k.choices;
    case T::Staleness: return "whole number or inf";
    default: break;
  }
  std::string r = number_text(k.min) + ".." + number_text(k.max);
  if (k.type == T::Seconds) r += " (units: ms, s, min, h)";
  if (k.zero_word) r += std::string(" or ") + k.zero_word;
  return r;
}

void apply_stop_precedence(LoopSettings& s, bool epochs_given, bool steps_or_duration_given) {
  if (steps_or_duration_given && !epochs_given) s.epochs = 0;
}

std::string knobs_markdown() {
  const LoopSettings defaults;
  std::string out =
      "| flag (rumor-peer) | key (rumor-sim) | keyword (rumor.Peer) | default | accepted | meaning |\n"
      "|---|---|---|---|---|---|\n";
  for (const Knob& k : kKnobs) {
    const auto cell = [&](unsigned scope, const std::string& s) {
      return (k.scope & scope) ? "`" + s + "`" : std::string("-");
    };
    const std::string def = k.default_text ? k.default_text : knob_value(k, defaults);
    const std::string unit = k.unit[0] && !(k.zero_word && def == k.zero_word) ? std::string(" ") + k.unit : "";
    std::string accepted = knob_range(k);
    std::replace(accepted.begin(), accepted.end(), '|', '/');  // a | would end the cell
    out += fmt::format("| {} | {} | {} | {}{} | {} | {} |\n", cell(Knob::kDaemon, knob_flag(k)),
                       cell(Knob::kSim, knob_key(k)), cell(Knob::kPython, k.name), def, unit, accepted, k.help);
  }
  return out;
}

}  // namespace rumor
