// The overlay graph of a simulation (sim/overlay.hpp): union-find over the running peers'
// active views.
#include "sim/overlay.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "sim/simulation_impl.hpp"

namespace rumor::sim {

namespace {
// Running, joined and holding the model (a joiner is linked by the walks of its join within a
// few round trips, and takes the model from one of those links).
bool running(const Simulation& sim, std::uint32_t i) {
  const PeerState s = sim.state(i);
  const Gossip* g = sim.gossip(i);
  return (s == PeerState::Training || s == PeerState::Settling) && g != nullptr && g->joined() && g->state_ready();
}
}  // namespace

OverlayGraph overlay_graph(const Simulation& sim) {
  OverlayGraph g;
  const std::uint32_t n = sim.ids();
  std::vector<std::uint32_t> parent(n);
  std::iota(parent.begin(), parent.end(), 0u);
  const auto find = [&](std::uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::size_t active_total = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!running(sim, i)) continue;
    ++g.live;
    const Gossip& gs = *sim.gossip(i);
    g.max_members = std::max(g.max_members, gs.view().members().size());
    const Overlay* o = gs.overlay();
    if (!o) continue;
    ++g.partial;
    g.max_active = std::max(g.max_active, o->active().size());
    g.max_passive = std::max(g.max_passive, o->passive().size());
    active_total += o->active().size();
    for (const PeerId& id : o->active()) {
      const std::int64_t j = peer_index(id);
      if (j < 0 || j >= n || !running(sim, static_cast<std::uint32_t>(j))) {
        ++g.dead_links;
        continue;
      }
      const Overlay* oj = sim.gossip(static_cast<std::uint32_t>(j))->overlay();
      if (!oj || !oj->in_active(peer_id(i))) ++g.one_way;
      parent[find(i)] = find(static_cast<std::uint32_t>(j));
    }
  }
  g.mean_active = g.partial ? static_cast<double>(active_total) / static_cast<double>(g.partial) : 0;
  std::vector<std::size_t> size(n, 0);
  for (std::uint32_t i = 0; i < n; ++i)
    if (running(sim, i)) ++size[find(i)];
  for (std::uint32_t i = 0; i < n; ++i)
    if (size[i] > 0) {
      ++g.components;
      g.largest = std::max(g.largest, size[i]);
    }
  return g;
}

std::size_t active_holders(const Simulation& sim, std::uint32_t peer) {
  const PeerId id = peer_id(peer);
  std::size_t k = 0;
  for (std::uint32_t i = 0; i < sim.ids(); ++i)
    if (i != peer && running(sim, i))
      if (const Overlay* o = sim.gossip(i)->overlay(); o && o->in_active(id)) ++k;
  return k;
}

std::size_t max_transfers_serving(const Simulation& sim) {
  std::size_t m = 0;
  for (std::uint32_t i = 0; i < sim.ids(); ++i)
    if (running(sim, i)) m = std::max(m, sim.gossip(i)->transfers_serving());
  return m;
}

}  // namespace rumor::sim
