// Starting a swarm of rumor-peer processes on loopback for a test: the first starts the swarm
// on a free port, the others join through it; per-peer flags may differ.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "process.hpp"

namespace rumor::test {

struct Swarm {
  std::filesystem::path dir;
  std::vector<std::unique_ptr<Process>> peers;
  std::string seed;

  // flags[i] are peer i's flags; every peer gets --metrics DIR/m<i> and --name p<i>.
  Swarm(const std::string& name, const std::vector<std::vector<std::string>>& flags) : dir(temp_dir(name)) {
    for (std::size_t i = 0; i < flags.size(); ++i) {
      std::vector<std::string> a = flags[i];
      a.insert(a.end(), {"--metrics", metrics(i).string(), "--name", "p" + std::to_string(i)});
      if (i) a.insert(a.end(), {"--join", seed});
      peers.push_back(std::make_unique<Process>(a, dir / ("log" + std::to_string(i))));
      if (i == 0) seed = peers[0]->listen_address();
    }
  }
  std::filesystem::path metrics(std::size_t i) const { return dir / ("m" + std::to_string(i)); }
  // Waits for every peer; returns true if all exited 0 in time.
  bool wait_all(double timeout_s) {
    bool ok = true;
    for (auto& p : peers) ok = (p->wait(timeout_s) == 0) && ok;
    return ok;
  }
  std::string done(std::size_t i) const {
    auto d = metric_lines(metrics(i), "done");
    return d.empty() ? std::string() : d.back();
  }
};

}  // namespace rumor::test
