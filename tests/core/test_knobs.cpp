// The table of loop knobs (core/knobs.hpp): every default reads back, values are checked the
// same way whatever front end they come from, and docs/flags.md is the table's own rendering.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/knobs.hpp"

using namespace rumor;

TEST_CASE("knobs: names are unique snake_case, and every default reads back as itself") {
  std::set<std::string> names;
  const LoopSettings defaults;
  for (const Knob& k : loop_knobs()) {
    CAPTURE(k.name);
    CHECK(names.insert(k.name).second);
    CHECK(std::string(k.name).find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == std::string::npos);
    CHECK(std::string(k.help).size() > 10);
    CHECK(find_knob(k.name) == &k);
    if (k.default_text) continue;  // derived (probe_timeout)
    LoopSettings s;
    set_knob(k, s, knob_value(k, defaults));
    CHECK(knob_value(k, s) == knob_value(k, defaults));
  }
  CHECK(find_knob("no_such_knob") == nullptr);
  // The defaults a peer's loop starts with, written once (peer_loop.hpp): 5 epochs, a join
  // retried for 120 s, the probe timeout derived from the interval.
  CHECK(defaults.epochs == 5);
  CHECK(defaults.gossip.join_timeout_s == 120);
  CHECK(defaults.resolved().gossip.probe_timeout_s == doctest::Approx(0.25));
  LoopSettings fast;
  set_knob(*find_knob("probe_interval"), fast, "0.1");
  CHECK(fast.resolved().gossip.probe_timeout_s == doctest::Approx(0.05));
}

TEST_CASE("knobs: values are parsed and range-checked with messages that say what is accepted") {
  LoopSettings s;
  set_knob(*find_knob("exchange_timeout"), s, "250ms");
  CHECK(s.gossip.exchange_timeout_s == doctest::Approx(0.25));
  set_knob(*find_knob("settle_max"), s, "2min");
  CHECK(s.settle_max_s == 120);
  set_knob(*find_knob("local_steps"), s, "16");
  CHECK(s.gossip.local_steps == 16);
  set_knob(*find_knob("staleness"), s, "4");
  CHECK(s.gossip.staleness == 4);
  set_knob(*find_knob("staleness"), s, "inf");
  CHECK(std::isinf(s.gossip.staleness));
  set_knob(*find_knob("codec"), s, "int8");
  CHECK(s.gossip.codec == PayloadCodec::Int8);
  set_knob(*find_knob("mix_weight"), s, "samples");
  CHECK(s.gossip.mix_weight == MixWeight::Samples);
  set_knob(*find_knob("stream_exchanges"), s, "false");
  CHECK(!s.gossip.stream_exchanges);
  set_knob(*find_knob("suspect_after"), s, "7");
  CHECK(s.gossip.suspect_after_failures == 7);

  const LoopSettings before = s;
  CHECK_THROWS_WITH_AS(set_knob(*find_knob("exchange_timeout"), s, "0"), doctest::Contains("out of range"), KnobError);
  CHECK_THROWS_WITH_AS(set_knob(*find_knob("exchange_timeout"), s, "5 parsecs"), doctest::Contains("unknown time unit"),
                       KnobError);
  CHECK_THROWS_WITH_AS(set_knob(*find_knob("local_steps"), s, "0"), doctest::Contains("out of range"), KnobError);
  CHECK_THROWS_WITH_AS(set_knob(*find_knob("local_steps"), s, "2.5"), doctest::Contains("whole number"), KnobError);
  CHECK_THROWS_WITH_AS(set_knob(*find_knob("staleness"), s, "-1"), doctest::Contains("or inf"), KnobError);
  CHECK_THROWS_WITH_AS(set_knob(*find_knob("codec"), s, "zip"), doctest::Contains("none,fp16,int8,int4,topk"), KnobError);
  CHECK_THROWS_WITH_AS(set_knob(*find_knob("robust"), s, "maybe"), doctest::Contains("true or false"), KnobError);
  CHECK_THROWS_WITH_AS(set_knob(*find_knob("max_in_flight"), s, "3"), doctest::Contains("1..2"), KnobError);
  CHECK_THROWS_AS(set_knob(*find_knob("topk_fraction"), s, "nan"), KnobError);
  // A refused value changes nothing.
  CHECK(knob_value(*find_knob("exchange_timeout"), s) == knob_value(*find_knob("exchange_timeout"), before));
  CHECK(s.gossip.local_steps == 16);
}

TEST_CASE("knobs: an explicit step or time budget replaces the default epochs, unless epochs were given") {
  LoopSettings s;
  apply_stop_precedence(s, false, true);
  CHECK(s.epochs == 0);
  LoopSettings t;
  t.epochs = 2;
  apply_stop_precedence(t, true, true);
  CHECK(t.epochs == 2);
  LoopSettings u;
  apply_stop_precedence(u, false, false);
  CHECK(u.epochs == 5);
}

TEST_CASE("knobs: docs/flags.md holds the table as the code renders it") {
  std::ifstream in(std::string(RUMOR_SOURCE_DIR) + "/docs/flags.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string page = ss.str();
  const std::string begin = "<!-- knobs:begin -->\n", end = "<!-- knobs:end -->";
  const auto b = page.find(begin), e = page.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  const std::string table = page.substr(b + begin.size(), e - b - begin.size());
  if (table != knobs_markdown()) {
    const std::string expected = std::string(RUMOR_BINARY_DIR) + "/flags-table.md";
    std::ofstream(expected) << knobs_markdown();
    FAIL("docs/flags.md's table differs from core/knobs.cpp: replace the lines between the markers with " << expected);
  }
}
