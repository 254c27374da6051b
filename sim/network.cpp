// The network model (network.hpp).
#include "sim/network.hpp"

#include <algorithm>
#include <limits>

#include "core/check.hpp"

namespace rumor::sim {

Network::Network(const Scenario& s, std::vector<std::uint32_t> class_of, Rng rng)
    : s_(s), class_of_(std::move(class_of)), rng_(rng), nic_free_(class_of_.size(), 0.0), rx_free_(class_of_.size(), 0.0) {
  const std::size_t n = class_of_.size();
  const auto sides = [n](const PeerSet& a, const PeerSet& b) {
    Sides sd{std::vector<bool>(n, false), std::vector<bool>(n, false)};
    for (auto x : a) sd.a[x] = true;
    for (auto x : b) sd.b[x] = true;
    return sd;
  };
  for (const auto& l : s.links) link_sides_.push_back(sides(l.a, l.b));
  for (const auto& p : s.partitions) partition_sides_.push_back(sides(p.a, p.b));
}

double Network::latency(std::uint32_t from, std::uint32_t to) const {
  double lat = s_.latency + s_.classes[class_of_[from]].latency + s_.classes[class_of_[to]].latency;
  for (std::size_t i = 0; i < s_.links.size(); ++i)
    if (s_.links[i].latency >= 0 && link_sides_[i].pair(from, to)) lat = s_.links[i].latency;
  return lat;
}

double Network::send_rate(std::uint32_t from, std::uint32_t to, double t) const {
  double bw = s_.classes[class_of_[from]].bandwidth_at(t);
  for (std::size_t i = 0; i < s_.links.size(); ++i)
    if (s_.links[i].bandwidth > 0 && link_sides_[i].pair(from, to)) bw = std::min(bw, s_.links[i].bandwidth);
  return bw;
}

double Network::next_change(std::uint32_t from, std::uint32_t to, double t) const {
  double next = std::numeric_limits<double>::infinity();
  const auto first_after = [&](const PeerClass& c) {
    for (const auto& ch : c.bandwidth_changes)
      if (ch.at > t) return next = std::min(next, ch.at);
    return next;
  };
  first_after(s_.classes[class_of_[from]]);
  if (to != kNoPeer) first_after(s_.classes[class_of_[to]]);
  return next;
}

template <class Rate>
double Network::serialise(double start, double bytes, std::uint32_t from, std::uint32_t to, Rate rate) const {
  // Piecewise across the rate changes that fall inside the message.
  double at = start, left = bytes;
  for (;;) {
    const double r = rate(at), next = next_change(from, to, at);
    if (at + left / r <= next) return at + left / r;
    left -= (next - at) * r;
    at = next;
  }
}

bool Network::partitioned(std::uint32_t a, std::uint32_t b, double t) const {
  for (std::size_t i = 0; i < s_.partitions.size(); ++i) {
    const auto& p = s_.partitions[i];
    if (t >= p.from && t < p.until && partition_sides_[i].pair(a, b)) return true;
  }
  return false;
}

double Network::refused_after(std::uint32_t from, std::uint32_t to) const {
  return s_.refused_after >= 0 ? s_.refused_after : 2 * latency(from, to);
}

double Network::transmit(std::uint32_t from, std::uint32_t to, std::uint64_t bytes, double now, double processing) {
  RUMOR_CHECK(from < nic_free_.size() && to < nic_free_.size());
  // The sender's NIC: busy for the message at its own rate.
  const double start = std::max(now, nic_free_[from]);
  const double b = static_cast<double>(bytes);
  double sent = serialise(start, b, from, kNoPeer, [&](double at) { return send_rate(from, to, at); });
  nic_free_[from] = sent;
  if (s_.limit_receive) {
    // The receiver's link: one message at a time at its own rate, so that the messages into it
    // share it (the same total), and a message is through when both ends' parts are. The
    // sender's NIC is not held meanwhile (the bytes wait in socket buffers, as with TCP). Until
    // 2026-12-07 the receiver's link was held at the slower end's rate: a 0.24 MB payload from
    // the testbed's S4 peer on 10 Mbit held a 1 Gbit receiver for 0.19 s, and every message of
    // the fast peers to it waited behind it, which real TCP flows sharing the link do not (the
    // settling exchanges between the fast peers took 0.16-0.37 s against 1-2 ms real).
    const double rx_start = std::max(start, rx_free_[to]);
    const double received = serialise(rx_start, b, to, kNoPeer, [&](double at) { return s_.classes[class_of_[to]].bandwidth_at(at); });
    rx_free_[to] = received;
    sent = std::max(sent, received);
  }
  double arrive = sent + latency(from, to) + processing;
  if (s_.jitter > 0) arrive += rng_.exponential(1.0 / s_.jitter);
  // The links' in-order clocks: an entry at or before `now` says nothing any more (every
  // arrival from now on is later, and a refusal comes at now + refused_after at the
  // earliest), so such entries are dropped whenever the table has doubled since the last
  // sweep. Outputs are unchanged; the table holds the links with messages in flight instead
  // of every link ever used (with partial views and random walks, hundreds per peer).
  if (link_last_.size() >= link_sweep_at_) {
    link_last_.keep_if([&](std::uint64_t, double last) { return last > now; });
    link_sweep_at_ = std::max<std::size_t>(1024, 2 * link_last_.size());
  }
  double& last = link_last_[(std::uint64_t(from) << 32) | to];
  arrive = std::max(arrive, last);
  last = arrive;
  if (s_.loss > 0 && rng_.uniform() < s_.loss) return -1;  // the NIC time was spent all the same
  return arrive;
}

void Network::reset_peer(std::uint32_t peer) {
  RUMOR_CHECK(peer < nic_free_.size());
  nic_free_[peer] = 0;
  rx_free_[peer] = 0;
  // In-order clocks of its links: only ever a lower bound, so stale ones are harmless; they
  // are dropped to keep the table from holding links of long-gone lives.
  link_last_.keep_if([&](std::uint64_t key, double) {
    const auto f = static_cast<std::uint32_t>(key >> 32), t = static_cast<std::uint32_t>(key);
    return f != peer && t != peer;
  });
}

namespace {
std::size_t link_slot(std::uint64_t key, std::size_t mask) {
  return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}
}  // namespace

double Network::LinkClocks::find(std::uint64_t key) const {
  if (slots_.empty()) return 0.0;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = link_slot(key, mask);; i = (i + 1) & mask) {
    if (slots_[i].key == key) return slots_[i].last;
    if (slots_[i].key == kEmpty) return 0.0;
  }
}

double& Network::LinkClocks::operator[](std::uint64_t key) {
  if (2 * (used_ + 1) > slots_.size()) {
    std::vector<Slot> old;
    old.swap(slots_);
    rebuild(old, 2 * old.size());
  }
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = link_slot(key, mask);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
  if (slots_[i].key == kEmpty) {
    slots_[i].key = key;
    slots_[i].last = 0;
    ++used_;
  }
  return slots_[i].last;
}

void Network::LinkClocks::rebuild(const std::vector<Slot>& entries, std::size_t min_slots) {
  std::size_t cap = 16;
  while (cap < min_slots) cap *= 2;
  slots_.assign(cap, Slot{});
  used_ = 0;
  for (const Slot& x : entries)
    if (x.key != kEmpty) (*this)[x.key] = x.last;
}

}  // namespace rumor::sim
