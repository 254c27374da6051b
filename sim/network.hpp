// The simulated network between peers: what a message costs and whether it arrives.
//
// Model (docs/sim.md, "Network"):
//   - a message of B bytes (B = 32-byte frame header + message header + payload, as on the wire)
//     is serialised by the sender's NIC, one message at a time in send order, at
//     min(sender's NIC bandwidth, the link's bandwidth): it starts when the NIC is free;
//   - it then takes the link's one-way latency, plus jitter (exponential, mean `jitter`);
//   - a link delivers in order (TCP): a message never overtakes an earlier one on its link;
//   - with probability `loss` it vanishes; across an active partition it vanishes too (both
//     at send and at arrival time). Vanished messages are silent: the protocol's deadlines
//     notice them;
//   - a class's `bandwidth_change` lines change its NIC's rate at set times: a message being
//     serialised across a change moves at each rate for the part of it that falls there;
//   - with `network.limit_receive`, the message also crosses the receiver's link, one message
//     at a time, at the receiver's rate (the messages into it share it), starting when the
//     sender starts it or when the receiver's link is free; it arrives when both are through
//     (the sender's NIC is free after its own part: the bytes wait in socket buffers, as with
//     TCP);
//   - link latency = network.latency + the two ends' class latency, unless a `link` line
//     sets it; without limit_receive, receive-side contention is not modelled.
// Everything random comes from the one network stream, drawn in event order.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.hpp"
#include "sim/scenario.hpp"

namespace rumor::sim {

class Network {
 public:
  // `class_of[i]` is the class of peer id i.
  Network(const Scenario& s, std::vector<std::uint32_t> class_of, Rng rng);

  double latency(std::uint32_t from, std::uint32_t to) const;
  bool partitioned(std::uint32_t a, std::uint32_t b, double t) const;
  // Delay before a sender learns that a connect to a dead peer was refused.
  double refused_after(std::uint32_t from, std::uint32_t to) const;

  // Arrival time of a `bytes`-byte message sent at `now` (advances the sender's NIC and the
  // link's in-order clock), or a negative number if the message is lost. `processing`: seconds
  // the ends' CPU adds on the message's path (a payload's copies, hashes and checks), inside
  // the link's order, so a later small message never overtakes it (one TCP connection).
  double transmit(std::uint32_t from, std::uint32_t to, std::uint64_t bytes, double now, double processing = 0);
  // When the last message sent from `from` to `to` arrives (0: none): a peer learns that a
  // connection was reset only after what came over it before (one TCP connection per pair,
  // docs/wire.md), so a refusal is never earlier than this.
  double last_arrival(std::uint32_t from, std::uint32_t to) const {
    return link_last_.find((std::uint64_t(from) << 32) | to);
  }
  // A restarted peer has a fresh NIC and fresh connections.
  void reset_peer(std::uint32_t peer);

 private:
  const Scenario& s_;
  std::vector<std::uint32_t> class_of_;
  Rng rng_;
  std::vector<double> nic_free_;  // per peer: when its NIC finishes the last queued message
  std::vector<double> rx_free_;   // per peer: when it finishes receiving (limit_receive)
  static constexpr std::uint32_t kNoPeer = 0xffffffffu;
  // The first bandwidth change of `from` or `to` (kNoPeer: only `from`) strictly after t.
  double next_change(std::uint32_t from, std::uint32_t to, double t) const;
  // The sender's NIC rate (its class, link lines) at t.
  double send_rate(std::uint32_t from, std::uint32_t to, double t) const;
  // When `bytes` starting at `start` are through, at rate(t), which changes only where
  // next_change(from, to, .) says.
  template <class Rate>
  double serialise(double start, double bytes, std::uint32_t from, std::uint32_t to, Rate rate) const;
  // (from << 32 | to) -> the link's last arrival: open addressing (linear probing, at most
  // half full) in one array, since every message reads and writes it (a node-based map spent
  // about 5% of a 10,000-peer simulation in its lookups, allocations and frees).
  class LinkClocks {
   public:
    double& operator[](std::uint64_t key);  // a new entry reads 0
    double find(std::uint64_t key) const;   // 0 if absent
    std::size_t size() const { return used_; }
    // Drops the entries for which keep(key, last) is false.
    template <class Keep>
    void keep_if(Keep keep) {
      std::vector<Slot> live;
      for (const Slot& x : slots_)
        if (x.key != kEmpty && keep(x.key, x.last)) live.push_back(x);
      rebuild(live, 2 * live.size() + 2);
    }

   private:
    static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};  // no link: peers' indices are < 2^32 - 1
    struct Slot {
      std::uint64_t key = kEmpty;
      double last = 0;
    };
    // Refills the table, at least min_slots long (a power of two, 16 or more), with the
    // non-empty entries given.
    void rebuild(const std::vector<Slot>& entries, std::size_t min_slots);
    std::vector<Slot> slots_;
    std::size_t used_ = 0;
  };
  LinkClocks link_last_;
  std::size_t link_sweep_at_ = 1024;                      // sweep link_last_ when it reaches this size
  // Per link line and partition line: membership bitmaps of the two sides.
  struct Sides {
    std::vector<bool> a, b;
    bool pair(std::uint32_t x, std::uint32_t y) const { return (a[x] && b[y]) || (b[x] && a[y]); }
  };
  std::vector<Sides> link_sides_, partition_sides_;
};

}  // namespace rumor::sim
