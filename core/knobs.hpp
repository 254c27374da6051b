// The one table of a peer's loop knobs: every setting of LoopSettings (and the GossipConfig
// inside it) that a user can set, with its name, field, type, unit, range and one line of help.
// The default is the field's initialiser in core (peer_loop.hpp, gossip.hpp, robust.hpp): the
// table only points at it, so no default is written twice.
//
// Everything user-facing is derived from it, so the worlds cannot drift apart:
//  - rumor-peer's flags: `--` + name with '_' -> '-' (peer/config.cpp, CLI11);
//  - rumor-sim's scenario keys: `section.name` (sim/scenario.cpp; docs/sim.md);
//  - the Python keyword arguments: the name itself (rumor.Peer(**knobs), python/module.cpp);
//  - the flag table of docs/flags.md (knobs_markdown(); tests/core/test_knobs.cpp and the CLI
//    test fail when the page, the flags, the keys or the keywords disagree with this table).
// Parsing and range checks are here too (set_knob), so a bad value gets the same message from
// a flag, a scenario key and a keyword argument.
//
// Not here: what only one driver has (rumor-peer's --data, --model, the optimizer; the
// simulator's network and compute models; Python's wait_timeout), and the settings the drivers
// derive (fetch_state from --resume / --min-peers, evaluate).
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include "core/peer_loop.hpp"

namespace rumor {

// A value that does not fit a knob; what() says what was expected (callers prefix the flag,
// key or keyword it came from).
struct KnobError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct Knob {
  enum class Type {
    Count,      // a whole number in [min, max]
    Real,       // a number in [min, max]
    Seconds,    // a duration in [min, max]: plain seconds, or with a unit (10ms, 2min)
    Bool,       // true/false (also 1/0, yes/no, on/off)
    Choice,     // one of `choices`
    Staleness,  // a whole number >= 0, or inf
  };
  // Which worlds offer it (Python's loop decides when training stops, so it has no stop rules).
  static constexpr unsigned kDaemon = 1, kSim = 2, kPython = 4, kAll = 7;
  // The group of the stop rules (rumor-peer --help lists it before the network's).
  static constexpr const char* kStopGroup = "When to stop (the first reached)";
  using Field = std::variant<double*, std::uint64_t*, int*, bool*, MixWeight*, PayloadCodec*, ViewMode*>;

  const char* name;     // snake_case: the Python keyword and the scenario key's last part
  const char* section;  // the scenario section: run, workload, gossip or output
  Type type;
  double min, max;      // numbers: the accepted range, inclusive
  const char* choices;  // Choice: "a|b|c"
  const char* unit;     // for the docs: "s", "steps", "" ...
  const char* group;    // rumor-peer --help group
  const char* help;     // one line
  unsigned scope;
  Field (*field)(LoopSettings&);
  const char* legacy_key = nullptr;  // an older scenario key still read (docs/sim.md)
  // Shown instead of the value where the default is derived (probe_timeout).
  const char* default_text = nullptr;
  // Count: a word accepted for 0, which means "chosen by the peer" (local_steps: auto).
  const char* zero_word = nullptr;
};

// Every knob, in the order of rumor-peer --help and docs/flags.md.
std::span<const Knob> loop_knobs();
// By name (snake_case) or nullptr.
const Knob* find_knob(std::string_view name);

// Parses `value` into the knob's field of `s`; throws KnobError naming what was expected.
void set_knob(const Knob& k, LoopSettings& s, std::string_view value);
// The field's value as text (the form set_knob reads back): the default shown by --help.
std::string knob_value(const Knob& k, const LoopSettings& s);
std::string knob_flag(const Knob& k);  // "--exchange-timeout"
std::string knob_key(const Knob& k);   // "gossip.exchange_timeout"
std::string knob_range(const Knob& k); // "0.01..3600", "none|fp16|int8|topk", "whole number or inf"

// A duration with an optional unit (s, ms, us, min, h): "10ms" -> 0.01. KnobError otherwise.
double parse_seconds(std::string_view text);

// The stop rules' precedence, one rule for every driver: an explicit --steps or --duration
// replaces the default epoch budget unless --epochs was given too.
void apply_stop_precedence(LoopSettings& s, bool epochs_given, bool steps_or_duration_given);

// Knobs that do not combine (codec topk with fragments > 1): the reason, or empty. Every
// driver refuses such settings with it.
std::string knob_conflicts(const LoopSettings& s);

// The markdown table of docs/flags.md: flag, scenario key, keyword, default, range, help.
std::string knobs_markdown();

}  // namespace rumor
