// Membership in the in-memory cluster: SWIM detection, indirect probes, refutation, joins,
// state transfer with retries, graceful leave with hand-over, and bad membership input.
#include <doctest/doctest.h>

#include "cluster.hpp"

using namespace rumor;
using namespace rumor::testing;

namespace {
std::vector<PeerId> seeds_for(int i) { return i ? std::vector<PeerId>{"p0"} : std::vector<PeerId>{}; }

double first_event_time(const Node& n, ProtocolEvent::Kind k, const PeerId& peer) {
  (void)n;
  (void)k;
  (void)peer;
  return -1;
}
}  // namespace

TEST_CASE("membership: a crashed peer leaves every view within the configured bound") {
  Cluster c;
  c.cfg.probe_interval_s = 0.2;
  c.cfg.probe_timeout_s = 0.1;
  c.cfg.suspect_timeout_s = 0.5;
  c.cfg.local_steps = 1000000;  // no exchanges: only the failure detector can notice
  for (int i = 0; i < 6; ++i) c.add("p" + std::to_string(i), random_params(3, i), seeds_for(i), 10 + i);
  c.run(2.0);
  for (const auto& [id, n] : c.nodes) REQUIRE(n->g->view().live_count() == 5);
  c.nodes["p4"]->alive = false;
  // Bound: probe cycle over 5 members + timeout + indirect round + suspicion, and dissemination.
  const double bound = 5 * 0.2 + 0.1 + 0.2 + 0.5 + 1.0;
  c.run(2.0 + bound);
  for (const auto& [id, n] : c.nodes) {
    if (id == "p4") continue;
    INFO(id);
    const Member* m = n->g->view().find("p4");
    REQUIRE(m);
    CHECK(m->d.state == MemberState::Dead);
    CHECK(n->g->view().live_count() == 4);
  }
}

TEST_CASE("membership: indirect probes keep a peer whose direct link is broken") {
  Cluster c;
  c.cfg.probe_interval_s = 0.2;
  c.cfg.probe_timeout_s = 0.1;
  c.cfg.suspect_timeout_s = 0.5;
  c.cfg.local_steps = 1000000;
  for (int i = 0; i < 4; ++i) c.add("p" + std::to_string(i), random_params(3, i), seeds_for(i), 30 + i);
  c.run(1.0);
  c.cut.insert({"p0", "p1"});
  c.cut.insert({"p1", "p0"});
  c.run(6.0);
  const Member* m = c.nodes["p0"]->g->view().find("p1");
  REQUIRE(m);
  CHECK(m->d.state == MemberState::Alive);
}

TEST_CASE("membership: views converge after a burst of joins through different seeds") {
  Cluster c;
  c.add("p0", random_params(3, 0), {}, 1);
  c.run(0.05);
  for (int i = 1; i < 16; ++i) c.add("p" + std::to_string(i), random_params(3, i), {"p" + std::to_string(i % 3 == 0 ? 0 : i - 1)}, 1 + i);
  c.run(3.0);
  for (const auto& [id, n] : c.nodes) {
    INFO(id);
    CHECK(n->g->view().live_count() == 15);
  }
}

TEST_CASE("membership: a wrongly suspected peer refutes and stays in every view") {
  Cluster c;
  c.cfg.suspect_timeout_s = 1.0;
  for (int i = 0; i < 4; ++i) c.add("p" + std::to_string(i), random_params(3, i), seeds_for(i), 50 + i);
  c.run(0.5);
  const auto inc = c.nodes["p2"]->g->view().self().incarnation;
  // p0 wrongly suspects p2 and gossips it.
  c.nodes["p0"]->g->on_message("p1", make_message(ExchangeBusyMsg{1, "x", {MemberDigest{"p2", inc, MemberState::Suspect, 0}}}));
  c.run(4.0);
  CHECK(c.nodes["p2"]->g->view().self().incarnation > inc);
  for (const auto& [id, n] : c.nodes) {
    if (id == "p2") continue;
    INFO(id);
    CHECK(n->g->view().find("p2")->d.state == MemberState::Alive);
  }
}

TEST_CASE("membership: a joiner takes the swarm's model and step, in chunks, from another member if one dies") {
  Cluster c;
  c.cfg.state_chunk_floats = 7;  // several chunks for 50 parameters
  c.cfg.state_timeout_s = 0.2;
  c.cfg.local_steps = 1000000;
  for (int i = 0; i < 3; ++i) c.add("p" + std::to_string(i), std::vector<float>(50, float(i + 1)), seeds_for(i), 70 + i);
  c.run(1.0);  // everyone stepped: clocks > 0, models (1, 2, 3) are "trained"
  c.cfg.fetch_state = true;  // the joiners below fetch the model
  Node& j = c.add("j", std::vector<float>(50, 100.0f), {"p1"}, 99);
  c.run(2.0);
  CHECK(j.g->state_ready());
  REQUIRE(j.g->adopted_step());
  CHECK(*j.g->adopted_step() > 100);
  INFO("j[0] " << j.params[0] << " j[49] " << j.params[49] << " p1 " << c.nodes["p1"]->params[0]);
  CHECK(j.params == std::vector<float>(50, 2.0f));  // p1 model, complete and untorn
  // A second joiner whose source dies after the join reply: it retries with another member.
  Node& k = c.add("k", std::vector<float>(50, 100.0f), {"p2"}, 98);
  c.run(2.0 + 0.007);  // JoinRequest/JoinReply done (2 x 3 ms), the first StateRequest on its way
  c.nodes["p2"]->alive = false;
  c.run(4.0);
  CHECK(k.g->state_ready());
  CHECK(k.params[0] != 100.0f);
  CHECK(k.params[0] != 3.0f);
  CHECK(k.env.count(ProtocolEvent::Kind::StateReceived) == 1);
}

TEST_CASE("membership: a joiner that asks for it gets the source's extra state of the same snapshot, byte for byte") {
  Cluster c;
  c.cfg.state_chunk_floats = 4;  // 16-byte chunks: the blob below comes in 4 of them
  c.cfg.state_timeout_s = 0.2;
  c.cfg.local_steps = 1000000;
  for (int i = 0; i < 2; ++i) c.add("p" + std::to_string(i), std::vector<float>(10, float(i + 1)), seeds_for(i), 80 + i);
  Bytes blob(61);
  for (std::size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<std::uint8_t>(i * 7 + 3);
  c.nodes["p0"]->g->set_extra_state(std::make_shared<const Bytes>(blob));
  c.run(1.0);
  c.cfg.fetch_state = true;
  c.cfg.fetch_extra_state = true;
  Node& j = c.add("j", std::vector<float>(10, 100.0f), {"p0"}, 90);
  c.run(1.5);
  REQUIRE(j.g->state_ready());
  CHECK(j.params == std::vector<float>(10, 1.0f));
  REQUIRE(j.g->received_extra_state() != nullptr);
  CHECK(*j.g->received_extra_state() == blob);
  CHECK(j.env.count(ProtocolEvent::Kind::StateReceived) == 1);
  CHECK(j.g->stats().rejected == 0);
  CHECK(c.nodes["p0"]->g->stats().rejected == 0);

  // A joiner that does not ask (rumor-peer) gets the model alone; so does one whose source has
  // no extra state.
  c.cfg.fetch_extra_state = false;
  Node& k = c.add("k", std::vector<float>(10, 100.0f), {"p0"}, 91);
  c.cfg.fetch_extra_state = true;
  Node& m = c.add("m", std::vector<float>(10, 100.0f), {"p1"}, 92);
  c.run(2.0);
  REQUIRE(k.g->state_ready());
  REQUIRE(m.g->state_ready());
  CHECK(k.params == std::vector<float>(10, 1.0f));
  CHECK(k.g->received_extra_state() == nullptr);
  CHECK(m.params == std::vector<float>(10, 2.0f));
  CHECK(m.g->received_extra_state() == nullptr);

  // A blob over the limit (8 x the model's bytes + 1 MiB) is not fetched: the model is taken.
  c.nodes["p1"]->g->set_extra_state(std::make_shared<const Bytes>(c.nodes["p1"]->g->max_extra_state_bytes() + 1, 1));
  Node& n = c.add("n", std::vector<float>(10, 100.0f), {"p1"}, 93);
  c.run(2.5);
  REQUIRE(n.g->state_ready());
  CHECK(n.params == std::vector<float>(10, 2.0f));
  CHECK(n.g->received_extra_state() == nullptr);
  CHECK(n.env.count(ProtocolEvent::Kind::StateReceived) == 1);
}

TEST_CASE("membership: extra-state requests outside the snapshot are refused and change nothing") {
  Cluster c;
  c.cfg.local_steps = 1000000;
  c.add("p0", std::vector<float>(10, 1.0f), {}, 1);
  c.nodes["p0"]->g->set_extra_state(std::make_shared<const Bytes>(100, 5));
  c.run(0.5);
  Gossip& g = *c.nodes["p0"]->g;
  // No snapshot for this transfer yet: an extra request alone is ignored (nothing sent back).
  g.on_message("x", make_message(StateRequestMsg{7, 0, 10, true, true}));
  CHECK(g.stats().rejected == 0);
  // The parameters' first request makes the snapshot; then bytes past its end are refused.
  g.on_message("x", make_message(StateRequestMsg{7, 0, 10, false, true}));
  g.on_message("x", make_message(StateRequestMsg{7, 95, 10, true, true}));
  CHECK(g.stats().rejected == 1);
  CHECK(c.nodes["p0"]->params == std::vector<float>(10, 1.0f));
}

TEST_CASE("membership: a joiner neither starts nor answers exchanges before it has the model") {
  Cluster c;
  c.cfg.fetch_state = true;
  c.add("p0", std::vector<float>(10, 1.0f), {}, 1);
  c.run(0.5);
  c.latency = 0.05;
  Node& j = c.add("j", std::vector<float>(10, 9.0f), {"p0"}, 2);
  // Before any reply arrives, j asks to exchange with p0 directly: refused (busy: joining).
  c.run(0.52);
  CHECK(!j.g->state_ready());
  CHECK(j.g->stats().exchanges + j.g->stats().answered == 0);
  c.run(2.0);
  CHECK(j.g->state_ready());
  CHECK(j.params[0] == doctest::Approx(1.0f));
}

TEST_CASE("membership: graceful leave hands the model to a neighbour and every view marks it left") {
  Cluster c;
  c.cfg.local_steps = 1000000;
  for (int i = 0; i < 4; ++i) c.add("p" + std::to_string(i), std::vector<float>(5, float(10 * i)), seeds_for(i), 80 + i);
  c.run(1.0);
  Node& l = *c.nodes["p3"];
  l.g->leave();
  c.run(1.5);
  CHECK(l.g->left());
  std::size_t handovers = 0;
  for (const auto& [id, n] : c.nodes) {
    if (id == "p3") continue;
    handovers += n->env.count(ProtocolEvent::Kind::Handover);
    CHECK(n->g->view().find("p3")->d.state == MemberState::Left);
    if (n->env.count(ProtocolEvent::Kind::Handover)) CHECK(n->params[0] == doctest::Approx((std::stof(id.substr(1)) * 10 + 30) / 2));
  }
  CHECK(handovers == 1);
}

TEST_CASE("membership: bad membership messages change nothing") {
  Cluster c;
  Node& a = c.add("a", {1, 2, 3}, {}, 1);
  Node& b = c.add("b", {4, 5, 6}, {"a"}, 2);
  c.run(0.5);
  const auto params = a.params;
  const auto members = a.g->view().members().size();
  // An impossible incarnation about b: ignored, b's refutation cannot overflow.
  a.g->on_message("x", make_message(ExchangeBusyMsg{1, "", {MemberDigest{"b", ~std::uint64_t{0}, MemberState::Dead, 0}}}));
  CHECK(a.g->view().find("b")->d.state == MemberState::Alive);
  b.g->on_message("x", make_message(ExchangeBusyMsg{1, "", {MemberDigest{"b", ~std::uint64_t{0}, MemberState::Dead, 0}}}));
  CHECK(b.g->view().self().incarnation < kMaxIncarnation);
  // Indirect probe of an unknown peer, relayed Ack about an unknown peer, a flood of them.
  for (int i = 0; i < 10000; ++i) {
    a.g->on_message("b", make_message(PingReqMsg{std::uint64_t(i), "ghost" + std::to_string(i), {}}));
    a.g->on_message("b", make_message(MsgType::Ack, PingMsg{std::uint64_t(i), {}, "ghost"}));
  }
  // A leave that names another peer, a hand-over with NaN, a state request out of range.
  a.g->on_message("b", make_message(LeaveMsg{1, 0, 1.0, 3, {MemberDigest{"c", 0, MemberState::Left, 0}}}, nullptr));
  std::vector<float> nan{NAN, 1, 1};
  auto self_left = b.g->view().self();
  self_left.state = MemberState::Left;
  a.g->on_message("b", make_message(LeaveMsg{2, 0, 1.0, 3, {self_left}}, encode_params(nan)));
  a.g->on_message("b", make_message(StateRequestMsg{1, 2, 5}));
  CHECK(a.params == params);
  CHECK(a.g->view().members().size() == members);
  CHECK(a.g->view().find("b")->d.state == MemberState::Alive);
  CHECK(a.g->stats().rejected == 3);
  (void)first_event_time;
}

TEST_CASE("view: the Alive list and live count follow every merge and local decision") {
  // Random digests and local decisions on a 300-member view, checked after each against a
  // brute-force scan of the members; and the piggybacked subset is distinct and unbiased.
  View v(MemberDigest{"self", 1, MemberState::Alive, 0});
  Rng rng(7);
  for (int op = 0; op < 20000; ++op) {
    const PeerId id = "m" + std::to_string(rng.below(300));
    const auto state = static_cast<MemberState>(rng.below(4));
    if (rng.below(4) == 0)
      v.set_state(id, state, op);
    else
      v.merge(MemberDigest{id, rng.below(6), state, rng.below(100)}, op);
    if (op % 97 != 0) continue;
    std::size_t live = 0, alive = 0;
    for (const Member& m : v.members()) {
      live += m.live();
      if (m.d.state == MemberState::Alive) {
        ++alive;
        REQUIRE(m.alive_pos < v.alive().size());
        REQUIRE(v.alive()[m.alive_pos] == &m);
      }
    }
    REQUIRE(v.live_count() == live);
    REQUIRE(v.alive().size() == alive);
  }
  REQUIRE(v.members().size() == 300);
  std::map<PeerId, int> seen;
  const int draws = 3000;
  for (int i = 0; i < draws; ++i) {
    const auto d = v.digest(11, rng);
    REQUIRE(d.size() == 11);
    CHECK(d[0].id == "self");
    std::set<PeerId> ids;
    for (std::size_t j = 1; j < d.size(); ++j) {
      ids.insert(d[j].id);
      ++seen[d[j].id];
    }
    REQUIRE(ids.size() == 10);  // distinct
  }
  // Each member is drawn with probability 10/300 per digest: 100 times expected in 3000
  // draws, standard deviation about 9.8; 6 sigma either way.
  REQUIRE(seen.size() == 300);
  for (const auto& [id, n] : seen) {
    CHECK(n > 40);
    CHECK(n < 160);
  }
}

TEST_CASE("view: the partial views' digest spreads the latest changes first, then a distinct sample") {
  // View::digest_partial (Gossip::digest with partial views): ourselves, up to `news` of the
  // members that most recently stopped being Alive (View::kNews kept), then `sample` others.
  View v(MemberDigest{"self", 1, MemberState::Alive, 0});
  Rng rng(5);
  for (int i = 0; i < 60; ++i) v.merge(MemberDigest{"m" + std::to_string(i), 1, MemberState::Alive, 0}, 0);
  // Quiet: no news, a distinct uniform sample of 3.
  std::map<PeerId, int> seen;
  for (int i = 0; i < 3000; ++i) {
    const auto d = v.digest_partial(32, 2, 3, rng);
    REQUIRE(d.size() == 4);
    CHECK(d[0].id == "self");
    REQUIRE(std::set<PeerId>{d[1].id, d[2].id, d[3].id}.size() == 3);
    for (std::size_t j = 1; j < d.size(); ++j) ++seen[d[j].id];
  }
  // 3/60 per digest: 150 expected in 3,000, standard deviation about 12; 6 sigma either way.
  REQUIRE(seen.size() == 60);
  for (const auto& [id, n] : seen) {
    CHECK(n > 78);
    CHECK(n < 222);
  }
  // News: m1 suspected, m2 dead, m3 left (m3 the latest); the news lead every digest, and
  // which 2 of the 3 lead is uniform.
  v.set_state("m1", MemberState::Suspect, 1);
  v.set_state("m2", MemberState::Dead, 2);
  v.merge(MemberDigest{"m3", 1, MemberState::Left, 0}, 3);
  REQUIRE(v.news().size() == 3);
  CHECK(v.news().back()->d.id == "m3");
  std::map<PeerId, int> led;
  for (int i = 0; i < 3000; ++i) {
    const auto d = v.digest_partial(32, 2, 3, rng);
    REQUIRE(d.size() == 6);
    for (std::size_t j : {1, 2}) {
      CHECK(d[j].state != MemberState::Alive);
      ++led[d[j].id];
    }
    std::set<PeerId> ids;
    for (const auto& x : d) ids.insert(x.id);
    REQUIRE(ids.size() == 6);  // the sample skips the news already in
  }
  REQUIRE(led.size() == 3);
  for (const auto& [id, n] : led) CHECK(std::abs(n - 2000) < 200);
  // A refuted suspicion is no longer news; an erased member leaves the list; the limit holds.
  v.merge(MemberDigest{"m1", 2, MemberState::Alive, 0}, 4);
  CHECK(v.erase(PeerId{"m2"}));
  REQUIRE(v.news().size() == 1);
  CHECK(v.news().front()->d.id == "m3");
  const auto d = v.digest_partial(3, 2, 3, rng);
  REQUIRE(d.size() == 3);
  CHECK(d[1].id == "m3");
  // Only the kNews latest are kept, the oldest dropped first.
  for (int i = 10; i < 30; ++i) v.set_state("m" + std::to_string(i), MemberState::Suspect, 5 + i);
  REQUIRE(v.news().size() == View::kNews);
  CHECK(v.news().front()->d.id == "m" + std::to_string(30 - View::kNews));
  CHECK(v.news().back()->d.id == "m29");
  // A view smaller than what is asked for gives what it has.
  View small(MemberDigest{"self", 1, MemberState::Alive, 0});
  small.merge(MemberDigest{"a", 1, MemberState::Alive, 0}, 0);
  small.merge(MemberDigest{"b", 1, MemberState::Dead, 0}, 0);
  const auto s2 = small.digest_partial(32, 2, 3, rng);
  REQUIRE(s2.size() == 3);
  CHECK(s2[1].id == "b");
  CHECK(s2[2].id == "a");
}

TEST_CASE("view: lookups by id agree with the members held through merges, state changes and erases") {
  // View::find goes through a hash index beside the id-ordered list (core/view.hpp); erases shift
  // probe runs back. Random merges, erases and local decisions over 2,000 ids (the index grows
  // and empties several times), checked after each against the ordered list, and the dead count too.
  View v(MemberDigest{"self", 1, MemberState::Alive, 0});
  Rng rng(11);
  for (int op = 0; op < 60000; ++op) {
    const std::uint64_t k = rng.below(op < 30000 ? 2000 : 40);
    const PeerId id = "p" + std::to_string(k);
    const std::uint64_t what = rng.below(8);
    if (what < 3)
      v.erase(id);
    else if (what == 3)
      v.set_state(id, static_cast<MemberState>(rng.below(4)), op);
    else
      v.merge(MemberDigest{id, rng.below(4), static_cast<MemberState>(rng.below(4)), rng.below(100)}, op);
    REQUIRE((v.find(id) != nullptr) == (v.members().count(id) == 1));
    if (op % 251 != 0) continue;
    std::size_t dead = 0;
    const Member* prev = nullptr;
    for (const Member& m : v.members()) {
      REQUIRE(v.find(m.d.id) == &m);
      if (prev) REQUIRE(prev->d.id < m.d.id);  // in id order, each once: scans are deterministic
      prev = &m;
      dead += m.d.state == MemberState::Dead;
    }
    REQUIRE(v.dead_count() == dead);
    for (int j = 0; j < 50; ++j) {
      const PeerId other = "p" + std::to_string(rng.below(4000));
      REQUIRE((v.find(other) != nullptr) == (v.members().count(other) == 1));
    }
  }
}

TEST_CASE("wire: member digests have docs/wire.md's layout, and a cut or bad byte anywhere is refused") {
  // A Ping: seq, the digest list, `about`. Per member: a uint64 length and the id's bytes,
  // incarnation, state (1 byte), clock, samples, done (1 byte); integers little-endian.
  PingMsg m{7, {MemberDigest{"p1", 3, MemberState::Suspect, 11, 640, false}, MemberDigest{"peer-two", 0, MemberState::Alive, 5, 320, true}}, "ab"};
  Bytes want;
  const auto u64 = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) want.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  const auto str = [&](const std::string& s) {
    u64(s.size());
    want.insert(want.end(), s.begin(), s.end());
  };
  u64(7);
  u64(2);
  for (const MemberDigest& d : m.view) {
    str(d.id);
    u64(d.incarnation);
    want.push_back(static_cast<std::uint8_t>(d.state));
    u64(d.clock);
    u64(d.samples);
    want.push_back(d.done ? 1 : 0);
  }
  str("ab");
  const Message msg = make_message(MsgType::Ping, m);
  CHECK(msg.header == want);
  const PingMsg back = decode_ping(msg);
  REQUIRE(back.view.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(back.view[i].id == m.view[i].id);
    CHECK(back.view[i].incarnation == m.view[i].incarnation);
    CHECK(back.view[i].state == m.view[i].state);
    CHECK(back.view[i].clock == m.view[i].clock);
    CHECK(back.view[i].samples == m.view[i].samples);
    CHECK(back.view[i].done == m.view[i].done);
  }
  CHECK(back.about == "ab");
  // Every cut is refused (a DecodeError, never a crash or a partial list).
  for (std::size_t n = 0; n < want.size(); ++n) {
    Message cut = msg;
    cut.header.resize(n);
    CHECK_THROWS_AS(decode_ping(cut), DecodeError);
  }
  // A count or an id length beyond the bytes left, a done byte that is not 0 or 1, a state
  // past Left: refused.
  const auto bad = [&](std::size_t at, std::uint8_t byte) {
    Message b = msg;
    b.header[at] = byte;
    return b;
  };
  CHECK_THROWS_WITH_AS(decode_ping(bad(8, 200)), "malformed Ping: length prefix exceeds message header size", DecodeError);
  CHECK_THROWS_WITH_AS(decode_ping(bad(16, 200)), "malformed Ping: length prefix exceeds message header size", DecodeError);
  const std::size_t done1 = 8 + 8 + (8 + 2 + 8 + 1 + 8 + 8);  // the first member's done byte
  CHECK_THROWS_WITH_AS(decode_ping(bad(done1, 2)), "malformed Ping: boolean field holds 2, not 0 or 1", DecodeError);
  CHECK_THROWS_AS(decode_ping(bad(8 + 8 + 8 + 2 + 8, 9)), DecodeError);  // the first member's state
}
