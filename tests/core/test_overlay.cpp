// Partial views (core/overlay.hpp, core/gossip_overlay.cpp) in the in-memory cluster: views
// stay bounded and symmetric, a crashed neighbour is replaced from the passive view, averaging
// goes on over the active views, the Overlay message decodes strictly, and malformed or
// misaddressed overlay input is refused and changes nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>

#include "cluster.hpp"
#include "core/overlay.hpp"
#include "core/view.hpp"

using namespace rumor;
using namespace rumor::testing;

namespace {
Cluster partial_cluster(int n, std::size_t active, std::size_t passive) {
  Cluster c;
  c.step_time = 0.05;  // 20 exchanges a second per peer: enough for the overlay's timings
  c.cfg.view = ViewMode::Partial;
  c.cfg.active_view = active;
  c.cfg.passive_view = passive;
  for (int i = 0; i < n; ++i)
    c.add("p" + std::to_string(i), {float(i), 0, 0}, i ? std::vector<PeerId>{"p0"} : std::vector<PeerId>{},
          std::uint64_t(i + 1));
  return c;
}
}  // namespace

TEST_CASE("overlay: bookkeeping keeps the views disjoint, bounded and without duplicates") {
  Overlay o(3, 5);
  Rng r(7);
  for (int i = 0; i < 20; ++i) o.add_passive("m" + std::to_string(i), r);
  CHECK(o.passive().size() == 5);
  for (int i = 0; i < 6; ++i) {
    const PeerId id = o.passive()[0];
    const auto dropped = o.add_active(id, r);
    CHECK(o.in_active(id));
    CHECK_FALSE(o.in_passive(id));
    CHECK(bool(dropped) == (i >= 3));  // a full active view drops one to the passive view
  }
  CHECK(o.active().size() == 3);
  CHECK(o.passive().size() <= 5);
  for (const auto& a : o.active()) CHECK_FALSE(o.in_passive(a));
  CHECK(o.add_active(o.active()[0], r) == std::nullopt);  // already there
  const PeerId a0 = o.active()[0];
  CHECK(o.demote(a0, r));
  CHECK(o.in_passive(a0) != o.in_active(a0));
  CHECK(o.remove(a0));
  CHECK_FALSE(o.remove(a0));
  CHECK(default_active_view(1000) == 10);
  CHECK(default_active_view(100000) == 17);
  CHECK(default_active_view(2) == 4);
}

TEST_CASE("overlay: the hashes it keeps and hands out are View's, and a dropped entry's comes with it") {
  // Gossip passes the overlay's kept hashes to View::find and the dropped entry's hash to the
  // forgetting of that member: a different hash function on either side would make those
  // lookups miss silently (members never forgotten, probes finding no one).
  Overlay o(2, 3);
  Rng r(11);
  View v(MemberDigest{"me"});
  for (int i = 0; i < 12; ++i) {
    const PeerId id = "m" + std::to_string(i);
    v.merge(MemberDigest{id}, 0.0);
    std::size_t dropped_hash = 0;
    const auto dropped = o.add_passive(id, View::hash_of(id), r, &dropped_hash);
    if (dropped) {
      CHECK(dropped_hash == View::hash_of(*dropped));
      CHECK(v.find(*dropped, dropped_hash) == v.find(*dropped));
    }
    if (i == 5) o.add_active(o.passive()[0], r);  // a reference into the view it changes
  }
  REQUIRE(o.active().size() == 1);
  REQUIRE(o.passive().size() == 3);
  for (std::size_t i = 0; i < o.passive().size(); ++i) {
    CHECK(o.passive_hashes()[i] == View::hash_of(o.passive()[i]));
    const Member* m = v.find(o.passive()[i], o.passive_hashes()[i]);
    REQUIRE(m != nullptr);
    CHECK(m->d.id == o.passive()[i]);
    CHECK(m->hash == o.passive_hashes()[i]);
    CHECK(o.in_passive(o.passive()[i], m->hash));
    CHECK_FALSE(o.in_active(o.passive()[i], m->hash));
  }
  CHECK(o.active_hashes()[0] == View::hash_of(o.active()[0]));
  CHECK(v.find("nobody", View::hash_of("nobody")) == nullptr);
}

TEST_CASE("overlay: 40 peers with partial views hold bounded, symmetric active views and average") {
  Cluster c = partial_cluster(40, 4, 12);
  c.run(20);
  double sum0 = 0;
  for (int i = 0; i < 40; ++i) sum0 += i;
  std::size_t one_way = 0;
  for (const auto& [id, n] : c.nodes) {
    REQUIRE(n->g->partial());
    const Overlay& o = *n->g->overlay();
    CHECK(o.active().size() <= 4);
    CHECK(o.active().size() >= 2);
    CHECK(o.passive().size() <= 12);
    CHECK(n->g->view().members().size() <= 2 * (4 + 12) + 16);
    for (const auto& a : o.active()) one_way += !c.nodes[a]->g->overlay()->in_active(id);
    CHECK(n->g->stats().rejected == 0);
  }
  CHECK(one_way <= 4);  // links in flight
  CHECK(c.weighted_sum(0) == doctest::Approx(sum0).epsilon(1e-4));  // mixing conserves the sum
  // And the models have come together.
  double lo = 1e9, hi = -1e9;
  for (const auto& [id, n] : c.nodes) {
    lo = std::min<double>(lo, n->params[0]);
    hi = std::max<double>(hi, n->params[0]);
  }
  CHECK(hi - lo < 1.0);
}

TEST_CASE("overlay: a crashed neighbour leaves every active view and is replaced from the passive view") {
  Cluster c = partial_cluster(30, 4, 12);
  c.run(10);
  c.nodes["p7"]->alive = false;
  c.run(25);
  for (const auto& [id, n] : c.nodes) {
    if (!n->alive) continue;
    CHECK_FALSE(n->g->overlay()->in_active("p7"));
    CHECK(n->g->overlay()->active().size() >= 2);
  }
}

TEST_CASE("overlay: malformed or misaddressed Overlay messages are refused and change nothing") {
  Cluster c = partial_cluster(6, 3, 6);
  c.run(3);
  Node& a = *c.nodes["p1"];
  const auto active = a.g->overlay()->active();
  const auto passive = a.g->overlay()->passive();
  const auto members = a.g->view().members().size();
  const auto params = a.params;
  const MemberDigest sender{"p2", 0, MemberState::Alive, 0};
  OverlayMsg good;
  good.kind = OverlayKind::Shuffle;
  good.subject = sender;
  good.view = {sender};
  std::size_t refused = 0;
  const auto send = [&](Message m) {
    a.g->on_message("p2", std::move(m));
    ++refused;
  };
  {  // unknown kind
    OverlayMsg m = good;
    m.kind = static_cast<OverlayKind>(9);
    send(make_message(m));
  }
  {  // ttl over the limit
    OverlayMsg m = good;
    m.ttl = 200;
    send(make_message(m));
  }
  {  // a sample larger than the limit
    OverlayMsg m = good;
    for (int i = 0; i < 100; ++i) m.peers.push_back(MemberDigest{"g" + std::to_string(i), 0, MemberState::Alive, 0});
    send(make_message(m));
  }
  {  // a bad member id in the sample, a bad state
    OverlayMsg m = good;
    m.peers = {MemberDigest{"", 0, MemberState::Alive, 0}};
    send(make_message(m));
    m.peers = {MemberDigest{"x", 0, static_cast<MemberState>(7), 0}};
    send(make_message(m));
  }
  {  // no sender digest; a first digest that is not the sender's
    OverlayMsg m = good;
    m.view.clear();
    send(make_message(m));
    m.view = {MemberDigest{"p3", 0, MemberState::Alive, 0}};
    send(make_message(m));
  }
  // Truncated header bytes.
  Message t = make_message(good);
  t.header.resize(t.header.size() / 2);
  send(t);
  CHECK(a.g->stats().rejected == refused);
  CHECK(a.g->overlay()->active() == active);
  CHECK(a.g->overlay()->passive() == passive);
  CHECK(a.g->view().members().size() == members);
  CHECK(a.params == params);
  const auto& ev = a.env.events;
  CHECK(ev.back().kind == ProtocolEvent::Kind::Rejected);
  CHECK(ev.back().reason.find("Overlay") != std::string::npos);
}

TEST_CASE("overlay: views stay full below the threshold with view auto, and go partial above it") {
  Cluster c;
  c.step_time = 0.05;
  c.cfg.view = ViewMode::Auto;
  c.cfg.view_threshold = 8;
  for (int i = 0; i < 6; ++i)
    c.add("p" + std::to_string(i), {0, 0, 0}, i ? std::vector<PeerId>{"p0"} : std::vector<PeerId>{}, i + 1);
  c.run(3);
  for (const auto& [id, n] : c.nodes) CHECK_FALSE(n->g->partial());
  for (int i = 6; i < 20; ++i) c.add("p" + std::to_string(i), {0, 0, 0}, {"p0"}, i + 1);
  c.run(10);
  std::size_t partial = 0;
  for (const auto& [id, n] : c.nodes) partial += n->g->partial();
  CHECK(partial == 20);
}

TEST_CASE("overlay: its lookup table answers as a scan of both views would, through every kind of change") {
  // Random adds, promotions, demotions and removals over 300 ids with small views (the table
  // grows, entries move on swap-removes and on backward shifts); after each, every id's
  // membership is checked against the views themselves.
  Rng rng(7);
  for (const auto& [a, p] : {std::pair<std::size_t, std::size_t>{4, 24}, {7, 42}, {1, 3}}) {
    Overlay o(a, p);
    std::vector<PeerId> ids;
    for (int i = 0; i < 300; ++i) ids.push_back("m" + std::to_string(i));
    const auto scan = [](const std::vector<PeerId>& v, const PeerId& id) { return std::find(v.begin(), v.end(), id) != v.end(); };
    for (int step = 0; step < 4000; ++step) {
      const PeerId& id = ids[rng.below(ids.size())];
      switch (rng.below(5)) {
        case 0: o.add_active(id, rng); break;
        case 1:
        case 2: o.add_passive(id, rng); break;
        case 3: o.demote(id, rng); break;
        case 4: o.remove(id); break;
      }
      if (step % 7 == 0 || step > 3900)
        for (const PeerId& x : ids) {
          REQUIRE(o.in_active(x) == scan(o.active(), x));
          REQUIRE(o.in_passive(x) == scan(o.passive(), x));
          REQUIRE(o.in_views(x, View::hash_of(x)) == (scan(o.active(), x) || scan(o.passive(), x)));
        }
      REQUIRE(o.active().size() <= a);
      REQUIRE(o.passive().size() <= p);
    }
  }
}

TEST_CASE("overlay: its flat maps answer and iterate as std::map does, through random changes") {
  // pending, declined and buried (core/flat_map.hpp): scans of them decide in key order, so
  // the order must be std::map's; checked against one after every change.
  FlatMap<PeerId, double> flat;
  std::map<PeerId, double> ref;
  Rng rng(5);
  for (int op = 0; op < 20000; ++op) {
    const PeerId id = "p" + std::to_string(rng.below(60));
    const std::uint64_t what = rng.below(6);
    if (what < 2) {
      flat[id] = static_cast<double>(op);
      ref[id] = static_cast<double>(op);
    } else if (what == 2) {
      REQUIRE(flat.erase(id) == ref.erase(id));
    } else if (what == 3) {
      const double cut = static_cast<double>(op) - 200;
      REQUIRE(flat.erase_if([&](const auto& x) { return x.second < cut; }) ==
              std::erase_if(ref, [&](const auto& x) { return x.second < cut; }));
    } else if (what == 4 && !ref.empty()) {
      // The oldest entry, first in key order among equals (Gossip::overlay_trim's choice).
      auto oldest = flat.begin();
      for (auto it = flat.begin(); it != flat.end(); ++it)
        if (it->second < oldest->second) oldest = it;
      auto ref_oldest = ref.begin();
      for (auto it = ref.begin(); it != ref.end(); ++it)
        if (it->second < ref_oldest->second) ref_oldest = it;
      REQUIRE(oldest->first == ref_oldest->first);
      flat.erase(oldest);
      ref.erase(ref_oldest);
    }
    REQUIRE(flat.count(id) == ref.count(id));
    const auto f = flat.find(id);
    REQUIRE((f == flat.end()) == (ref.find(id) == ref.end()));
    if (f != flat.end()) REQUIRE(f->second == ref.at(id));
    REQUIRE(flat.size() == ref.size());
    if (op % 101 == 0)
      REQUIRE(std::equal(flat.begin(), flat.end(), ref.begin(), ref.end(),
                         [](const auto& a, const auto& b) { return a.first == b.first && a.second == b.second; }));
  }
}
