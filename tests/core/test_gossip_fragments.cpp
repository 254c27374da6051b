// Fragments and the int4 codec in the in-memory cluster (tests/core/cluster.hpp): the weighted
// sum is conserved, pure averaging reaches consensus (with int4 far below the 4-bit step),
// every mix touches one fragment's range and the run covers every coordinate, the references
// heal after a lost accept, and a peer that cuts the model differently is declined.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "cluster.hpp"

using namespace rumor;
using namespace rumor::testing;

namespace {
struct Run {
  double drift = 0;  // largest change of a coordinate's mean
  double worst = 0;  // largest relative distance of a peer to the initial mean
};

// n peers, pure averaging (no training) for `seconds`, then the open exchanges finish.
Run average(Cluster& c, int n, std::size_t P, double seconds, std::uint64_t seed) {
  std::vector<double> mean(P, 0.0);
  for (int i = 0; i < n; ++i) {
    auto p = random_params(P, seed + i);
    for (std::size_t j = 0; j < P; ++j) mean[j] += p[j] / n;
    c.add("p" + std::to_string(i), p, i ? std::vector<PeerId>{"p0"} : std::vector<PeerId>{}, seed * 7 + i);
  }
  c.run(seconds);
  c.stepping = false;  // let the open exchanges finish: their halves are applied at two instants
  c.run(seconds + 1.0);
  Run r;
  std::vector<double> now(P, 0.0);
  const std::vector<float> m(mean.begin(), mean.end());
  for (const auto& [id, node] : c.nodes) {
    for (std::size_t j = 0; j < P; ++j) now[j] += node->params[j] / n;
    r.worst = std::max(r.worst, relative_distance(node->params, m));
  }
  for (std::size_t j = 0; j < P; ++j) r.drift = std::max(r.drift, std::abs(now[j] - mean[j]));
  return r;
}
}  // namespace

TEST_CASE("gossip: fragments and int4 conserve the sum, and pure averaging reaches consensus (int4 far below its step)") {
  struct Case {
    PayloadCodec codec;
    std::uint64_t fragments;
    bool outer;
    double consensus;  // bound on the final distance to the mean
    bool one_shot = false;  // stream_exchanges off: the request carries x_s (int4 streams anyway)
  };
  for (Case k : {Case{PayloadCodec::None, 4, false, 1e-5}, Case{PayloadCodec::None, 3, true, 1e-5},
                 Case{PayloadCodec::Fp16, 4, false, 2e-3}, Case{PayloadCodec::Int8, 4, false, 2e-2},
                 Case{PayloadCodec::Int4, 1, false, 1e-5}, Case{PayloadCodec::Int4, 4, false, 1e-5},
                 Case{PayloadCodec::Int4, 4, true, 1e-5}, Case{PayloadCodec::None, 4, false, 1e-5, true},
                 Case{PayloadCodec::Int8, 3, false, 2e-2, true}, Case{PayloadCodec::Int4, 2, false, 1e-5, true}}) {
    Cluster c;
    c.cfg.codec = k.codec;
    c.cfg.stream_exchanges = !k.one_shot;
    c.cfg.fragments = k.fragments;
    if (k.outer) c.cfg.outer = OuterConfig{0.7, 0.9, true};  // training off: every outer step is the identity
    const Run r = average(c, 6, 301, 6.0, 500);
    std::uint64_t exchanges = 0, absolute = 0, rejected = 0;
    for (const auto& [id, node] : c.nodes) {
      exchanges += node->g->stats().exchanges;
      absolute += node->g->stats().int4_absolute;
      rejected += node->g->stats().rejected;
    }
    INFO(std::string(codec_name(k.codec)) << ", " << k.fragments << " fragments" << std::string(k.outer ? ", outer momentum" : "") << std::string(k.one_shot ? ", one-shot" : "") << ": drift " << r.drift
                             << ", worst distance to the mean " << r.worst << ", " << exchanges << " exchanges, " << absolute
                             << " int4 fallbacks to absolute int8");
    CHECK(rejected == 0);
    CHECK(r.drift < 1e-5);
    CHECK(r.worst < k.consensus);
    if (k.codec == PayloadCodec::Int4) {
      // The first exchange of each pair and range is absolute (no references yet); the rest
      // are residuals. A 4-bit step on these models is about max|x| / 7 / 2 ~ 0.2 of |x|'s
      // scale, and the peers end 1e-5 apart: the error feedback keeps consensus going.
      CHECK(absolute > 0);
      CHECK(absolute < exchanges);
    }
  }
}

TEST_CASE("gossip: with fragments the sum is conserved after every event (codec none)") {
  Cluster c;
  c.cfg.fragments = 4;
  const std::size_t P = 10;  // fragments of 2, 3, 2, 3 parameters
  for (int i = 0; i < 5; ++i) c.add("p" + std::to_string(i), random_params(P, 60 + i), i ? std::vector<PeerId>{"p0"} : std::vector<PeerId>{}, 3 + i);
  c.latency = 0;  // both halves of an exchange land at the same instant
  std::vector<double> s0(P);
  for (std::size_t j = 0; j < P; ++j) s0[j] = c.weighted_sum(j);
  for (int k = 1; k <= 200; ++k) {
    c.run(k * 0.005);
    for (std::size_t j = 0; j < P; ++j) CHECK(c.weighted_sum(j) == doctest::Approx(s0[j]).epsilon(1e-6));
  }
}

TEST_CASE("gossip: every mix changes one fragment's range only, and the fragments cover every coordinate") {
  for (PayloadCodec codec : {PayloadCodec::None, PayloadCodec::Int8, PayloadCodec::Int4}) {
    Cluster c;
    c.cfg.codec = codec;
    c.cfg.fragments = 4;
    const std::size_t P = 103;
    for (int i = 0; i < 4; ++i) c.add("p" + std::to_string(i), random_params(P, 80 + i), i ? std::vector<PeerId>{"p0"} : std::vector<PeerId>{}, 5 + i);
    std::map<PeerId, std::vector<float>> before;
    std::map<PeerId, std::vector<bool>> touched;
    bool outside = false;
    c.before_event = [&](Node& n) { before[n.env.self] = n.params; };
    c.after_event = [&](Node& n) {
      const auto& b = before[n.env.self];
      auto& t = touched[n.env.self];
      t.resize(P, false);
      std::size_t first = P, last = 0;
      for (std::size_t j = 0; j < P; ++j)
        if (n.params[j] != b[j]) {
          first = std::min(first, j);
          last = j;
          t[j] = true;
        }
      if (first == P) return;
      // The changed coordinates lie within one fragment's range.
      bool inside = false;
      for (std::uint64_t k = 0; k < 4; ++k)
        inside = inside || (first >= ExchangeMsg::fragment_lo(P, k, 4) && last < ExchangeMsg::fragment_lo(P, k + 1, 4));
      outside = outside || !inside;
    };
    c.run(1.0);
    INFO(std::string(codec_name(codec)));
    CHECK_FALSE(outside);
    for (const auto& [id, t] : touched) {
      std::size_t n = 0;
      for (bool b : t) n += b;
      CHECK(n == P);
    }
    for (const auto& [id, node] : c.nodes) CHECK(node->g->fragments() == 4);
  }
}

TEST_CASE("gossip: int4 references that fell apart (a lost accept, a restart) heal through one absolute exchange") {
  Cluster c;
  c.cfg.codec = PayloadCodec::Int4;
  c.cfg.fragments = 2;
  const std::size_t P = 200;
  Node& a = c.add("p0", random_params(P, 1), {}, 1);
  Node& b = c.add("p1", random_params(P, 2), {"p0"}, 2);
  // Training (a little noise each step) keeps the models moving, so that references set by
  // one side only really differ from the other side's.
  Rng noise(3);
  c.local_step = [&](Node& n) {
    for (auto& x : n.params) x += static_cast<float>(1e-3 * noise.normal());
  };
  c.run(0.5);
  // Both ranges of the pair have references by now, and exchanges send residuals.
  const std::uint64_t absolute_before = a.g->stats().int4_absolute + b.g->stats().int4_absolute;
  const std::uint64_t exchanges_before = a.g->stats().exchanges + b.g->stats().exchanges + a.g->stats().answered + b.g->stats().answered;
  CHECK(absolute_before >= 2);
  CHECK(exchanges_before > 2 * absolute_before);
  // Lose one accept: the responder has mixed and moved its references, the initiator neither.
  int lost = 0;
  c.drop = [&](const PeerId&, const PeerId&, const Message& m) {
    if (m.type != MsgType::ExchangeAccept || lost) return false;
    ++lost;
    return true;
  };
  c.run(0.6);
  REQUIRE(lost == 1);
  c.run(8.0);  // the initiator's deadline (5 s) passes, then the pair exchanges again
  const std::uint64_t absolute_after = a.g->stats().int4_absolute + b.g->stats().int4_absolute;
  INFO("absolute exchanges before " << absolute_before << ", after " << absolute_after);
  CHECK(absolute_after > absolute_before);       // the mismatch was seen and fell back ...
  CHECK(absolute_after <= absolute_before + 4);  // ... once per side and range, not for ever
  CHECK(a.g->stats().rejected + b.g->stats().rejected == 0);
  CHECK(a.g->stats().failed + b.g->stats().failed >= 1);
  // And averaging goes on to consensus with residuals.
  c.local_step = nullptr;
  c.run(9.5);
  c.stepping = false;
  c.run(10.5);
  CHECK(relative_distance(a.params, b.params) < 1e-5);
  CHECK(a.g->codec_refs().size() == 1);
}

TEST_CASE("gossip: int4 references are kept for at most int4_partners partners (least recently used goes)") {
  Cluster c;
  c.cfg.codec = PayloadCodec::Int4;
  c.cfg.int4_partners = 3;
  for (int i = 0; i < 8; ++i) c.add("p" + std::to_string(i), random_params(40, 300 + i), i ? std::vector<PeerId>{"p0"} : std::vector<PeerId>{}, 9 + i);
  c.run(2.0);
  for (const auto& [id, node] : c.nodes) {
    CHECK(node->g->codec_refs().size() <= 3 + 2);  // + those in an exchange right now
    CHECK(node->g->stats().rejected == 0);
  }
  c.stepping = false;
  c.run(3.0);
  for (const auto& [id, node] : c.nodes) CHECK(node->g->codec_refs().size() <= 3);
}

TEST_CASE("gossip: a peer that cuts the model into another number of fragments is declined, nothing changes") {
  Cluster c;
  c.cfg.fragments = 4;
  const auto p0 = random_params(20, 1), p1 = random_params(20, 2);
  Node& a = c.add("p0", p0, {}, 1);
  c.cfg.fragments = 2;
  Node& b = c.add("p1", p1, {"p0"}, 2);
  c.run(1.0);
  CHECK(a.params == p0);
  CHECK(b.params == p1);
  CHECK(a.g->stats().exchanges + b.g->stats().exchanges + a.g->stats().answered + b.g->stats().answered == 0);
  CHECK(a.g->stats().failed + b.g->stats().failed > 0);
  CHECK(a.g->stats().rejected + b.g->stats().rejected == 0);
  bool said = false;
  for (const Node* n : {&a, &b})
    for (const auto& e : n->env.events)
      said = said || (e.kind == ProtocolEvent::Kind::ExchangeFailed && e.reason.find("fragments mismatch") != std::string::npos);
  CHECK(said);
}

TEST_CASE("gossip: a malformed int4 payload or reply is refused and changes nothing (model, references)") {
  // Each kind of bad bytes, in x_s (ExchangePayload) or in y_s (ExchangeReply): a level of -8,
  // a negative scale, a short payload. The receiver refuses it, mixes nothing and keeps its
  // references; the exchange then fails on both sides.
  struct Bad {
    MsgType where;
    int kind;  // 0: level -8, 1: negative scale, 2: one byte short
  };
  for (Bad bad : {Bad{MsgType::ExchangePayload, 0}, Bad{MsgType::ExchangePayload, 1}, Bad{MsgType::ExchangePayload, 2},
                  Bad{MsgType::ExchangeReply, 0}, Bad{MsgType::ExchangeReply, 1}, Bad{MsgType::ExchangeReply, 2}}) {
    Cluster c;
    c.cfg.codec = PayloadCodec::Int4;
    c.cfg.fragments = 2;
    const std::size_t P = 130;
    Node& a = c.add("p0", random_params(P, 1), {}, 1);
    Node& b = c.add("p1", random_params(P, 2), {"p0"}, 2);
    Rng noise(4);
    c.local_step = [&](Node& n) {
      for (auto& x : n.params) x += static_cast<float>(1e-3 * noise.normal());
    };
    c.run(0.3);  // references in place: residual exchanges
    bool armed = true, done = false;
    c.tamper = [&](const PeerId&, const PeerId&, Message& m) {
      if (!armed || m.type != bad.where || !m.payload) return;
      const ExchangeMsg h = decode_exchange(m);
      if (h.absolute) return;  // a residual one
      armed = false;
      Bytes p = *m.payload;
      if (bad.kind == 0) p.back() = static_cast<std::uint8_t>((p.back() & 0xF0u) | 0x08u);  // (P / 2 = 65 values: no padding)
      if (bad.kind == 1) {
        const float s = -1.0f;
        std::memcpy(p.data(), &s, 4);
      }
      if (bad.kind == 2) p.pop_back();
      m.payload = std::make_shared<const Bytes>(std::move(p));
    };
    // Around every event: a refusal leaves the model and the references as they were.
    std::vector<float> params_before;
    std::vector<PairRefs> refs_before;
    std::uint64_t rejected_before = 0;
    bool changed = false;
    c.before_event = [&](Node& n) {
      params_before = n.params;
      refs_before = n.g->codec_refs().entries();
      rejected_before = n.g->stats().rejected;
    };
    c.after_event = [&](Node& n) {
      if (n.g->stats().rejected == rejected_before) return;
      done = true;
      const auto& now = n.g->codec_refs().entries();
      changed = changed || n.params != params_before || now.size() != refs_before.size();
      for (std::size_t i = 0; i < now.size() && i < refs_before.size(); ++i)
        changed = changed || now[i].mine != refs_before[i].mine || now[i].theirs != refs_before[i].theirs || now[i].valid != refs_before[i].valid;
    };
    c.run(0.6);
    INFO((bad.where == MsgType::ExchangePayload ? "x_s" : "y_s") << ", kind " << bad.kind);
    CHECK_FALSE(armed);
    CHECK(done);
    CHECK_FALSE(changed);
    CHECK(a.g->stats().rejected + b.g->stats().rejected == 1);
  }
}
