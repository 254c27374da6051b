// `rumor-sim --calibrate`: measures this machine so that a scenario can predict a real
// rumor-peer run on it (docs/sim.md, "Calibration"). Tooling, not the simulator: it forks
// processes, opens sockets and reads the wall clock, so it lives in tools/ (library
// rumor_calibrate, linked by the rumor-sim executable only), outside the deterministic
// simulator's folder sim/, whose library never does any of that.
//
// What it measures, each under the conditions of the quickstart (examples/quickstart.sh:
// `--procs` peers sharing this machine's cores):
//   step_time     one Trainer::step() of mlp:256,128, batch 64, Adam on a Fashion-MNIST shard,
//                 with `procs` processes stepping at once (so core sharing is in the number);
//   exchange_cpu  the CPU one payload message costs a peer, per message sent or received: the
//                 snapshot copy and the frame hash, or on receipt the hash check, the checks,
//                 the distance and the mix (net/ and core/ code), with `procs` at once; plus
//                 the kernel's socket copy (payload bytes / loopback bandwidth);
//   eval_time     one evaluation on the whole test set, with `procs` at once;
//   bandwidth     loopback TCP throughput (one connection, 1 MiB writes) while `procs`
//                 processes train, as the peers' I/O threads see it in the run; alone
//                 (idle_bandwidth) for the CPU one copy costs;
//   latency       half the loopback TCP round trip of a small message;
//   time_slice    with `procs` processes busy, how long one runs before it waits for a core
//                 (the scheduler's slice: compute.time_slice).
#pragma once
#include <ostream>
#include <string>

namespace rumor::sim {

struct CalibrationConfig {
  int procs = 4;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "mlp:256,128";
  std::size_t batch = 64;
  // Each measurement runs for a window of wall time, the same in every process, so that all
  // `procs` contend for the cores throughout it.
  double step_seconds = 1.5;    // steps timed per process (after 20 warm-up steps)
  double message_seconds = 0.5; // payload messages timed per process
  double single_seconds = 0.5;  // steps timed by one process alone
  std::size_t tcp_mb = 256;   // bytes pushed through loopback for the bandwidth
};

struct Calibration {
  double step_time = 0, step_sd = 0;  // seconds; relative sd over the processes' steps
  double exchange_cpu = 0, eval_time = 0;
  double bandwidth = 0, latency = 0;
  double idle_bandwidth = 0;          // the same with nothing else running
  double single_step_time = 0;        // one process alone
  double single_step_sd = 0;          // relative sd of its steps
  double time_slice = 0;              // mean run of a busy process between waits for a core, `procs` busy
  double load_time = 0;               // loading Fashion-MNIST and cutting a shard, alone
  double joiner_load_time = 0;        // the same, procs - 1 at once (the first waits for them: --min-peers)
  std::size_t payload_bytes = 0;      // the model's parameters as an exchange payload
  int cores = 0;
};

Calibration calibrate(const CalibrationConfig& c, std::ostream& log);
// The scenario fragment ([compute] and [network] keys) to `include` from a scenario. It is
// written for compute.shared_cores = cores: the base step time is the one process's, scaled
// by how much worse than a fair share of the cores `procs` processes did.
std::string calibration_fragment(const Calibration& r, const CalibrationConfig& c);

}  // namespace rumor::sim
