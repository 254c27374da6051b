// The overlay of partial views in a simulation, as a graph (core/overlay.hpp; docs/sim.md,
// "Partial views"): the undirected graph whose nodes are the running peers and whose edges are
// their active views' entries between running peers. tests/sim/test_overlay.cpp and
// bench/overlay_properties.sh check its connectivity, degrees and how fast a crashed peer
// leaves it. Reads the simulation only.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rumor::sim {

class Simulation;

struct OverlayGraph {
  std::size_t live = 0;          // running peers that have joined and hold the model
  std::size_t partial = 0;       // of them, running partial views
  std::size_t components = 0;    // connected components among the running peers (1: connected)
  std::size_t largest = 0;       // peers in the largest component
  std::size_t max_active = 0, max_passive = 0;
  double mean_active = 0;
  std::size_t max_members = 0;   // the largest View (members held, tombstones included)
  std::size_t dead_links = 0;    // active entries naming a peer that is not running
  std::size_t one_way = 0;       // active entries not matched by the other side's
  bool connected() const { return components <= 1; }
};

OverlayGraph overlay_graph(const Simulation& sim);
// How many running peers hold `peer` in their active view (0: it has left every live view).
std::size_t active_holders(const Simulation& sim, std::uint32_t peer);
// The most joiners' snapshots any running peer holds now (state transfers served at a time).
std::size_t max_transfers_serving(const Simulation& sim);

}  // namespace rumor::sim
