// The textbook algorithms that users weigh gossip against, in the simulator's network and
// compute models: synchronous decentralized SGD with a mixing matrix (D-PSGD, CTA and ATC),
// push-sum / Stochastic Gradient Push, local SGD and DiLoCo, centralized mini-batch SGD, ring
// all-reduce, and a parameter server (synchronous, asynchronous, stale-synchronous).
// Gossip itself is core's real protocol in sim/simulator.hpp; this file is the comparison.
//
// The math is really executed with the same workloads (sim/workload.hpp: core's Trainer on the
// same shards, or the noisy quadratic) and the peers' own optimizer from core/. Time is virtual
// and comes from the same models: each peer's step time (classes, distributions, stragglers)
// and the network (sim/network.hpp: NIC serialisation, latency, jitter). docs/sim.md,
// "Algorithms", has the update rules and the time model of each; in short:
//   rounds: every peer takes one local step per round; a communication round (every H =
//     gossip.local_steps rounds; every round for the gradient-averaging ones) is a barrier.
//     D-PSGD/SGP: every message of the round goes through Network::transmit (CTA sends at the
//     round's start, overlapping the step; ATC and SGP after it); the round ends when every
//     peer has its step and every message it waits for. All-reduce (and local SGD, DiLoCo):
//     max step + 2(n-1)/n B/bw + 2(n-1) latency. Synchronous parameter server: every push
//     then every pull through the server's one NIC, in series.
//   events: the asynchronous and stale-synchronous parameter server, worker by worker, the
//     server's NIC a queue each way.
// Contract: deterministic for a seed (single-threaded; every draw from the scenario's streams);
// bad scenarios are refused by the scenario parser or this constructor (std::invalid_argument).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/mixing.hpp"
#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

namespace rumor::sim {

class AlgorithmRun {
 public:
  // s.algorithm must not be Gossip. Loads the workload. Throws std::invalid_argument /
  // DataError with a readable reason.
  explicit AlgorithmRun(const Scenario& s);
  ~AlgorithmRun();
  AlgorithmRun(const AlgorithmRun&) = delete;
  AlgorithmRun& operator=(const AlgorithmRun&) = delete;

  void run();
  double now() const;

  // Outputs with the columns of the gossip simulator's (docs/sim.md, "Outputs").
  std::string timeseries_csv() const;
  std::string events_csv() const;
  std::string summary_json() const;
  void write_outputs(const std::string& dir) const;

  const Scenario& scenario() const;
  std::uint32_t peers() const;
  // Peer i's model (for the server algorithms: the last model it received from the server).
  std::span<const float> params(std::uint32_t peer) const;
  // The server's / the global model (centralized, all-reduce, parameter servers: the model;
  // DiLoCo: the outer model, in double then rounded; others: empty).
  std::vector<float> global_params() const;
  // SGP: the push-sum weight w_i and numerator x_i (z_i = x_i / w_i is params()).
  double push_sum_weight(std::uint32_t peer) const;
  std::span<const double> push_sum_numerator(std::uint32_t peer) const;
  // The mixing matrix's spectrum (D-PSGD, SGP; zeros otherwise).
  const Spectrum& spectrum() const;
  std::uint64_t rounds() const;     // rounds (or, for the asynchronous servers, updates) done
  std::uint64_t max_clock_gap() const;  // parameter servers: the largest (max - min) clock seen
  double mean_staleness() const;    // parameter servers: mean (server version - version used)
  std::uint64_t message_bytes() const;  // B of one model message
  // The ring all-reduce's time for one model (the formula of docs/sim.md).
  double allreduce_time() const;
  const std::vector<Sample>& samples() const;
  const Totals& totals() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rumor::sim
