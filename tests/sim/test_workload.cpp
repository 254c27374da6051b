// The simulated peers compute what rumor-peer computes: the same shard rows, the same initial
// model and batch order, hence bit for bit the same parameters after the same steps.
#include <doctest/doctest.h>

#include <cstring>

#include "core/trainer.hpp"
#include "data/files.hpp"
#include "data/partition.hpp"
#include "sim/scenario.hpp"
#include "sim/workload.hpp"

using namespace rumor;
using namespace rumor::sim;

TEST_CASE("workload: peer k of N trains exactly like rumor-peer --shard k/N") {
  const Scenario s = parse_scenario(
      "[run]\npeers = 4\nseed = 9\n[workload]\ndata = synthetic\nmodel = mlp:16\nbatch = 32\noptimizer = adam\nlr = 0.002\n",
      "t.ini", {});
  Workload w(s, 4);
  for (std::uint32_t k = 0; k < 4; k += 3) {
    // What peer/daemon.cpp does with --data synthetic --shard k+1/4 --seed 9.
    Task task = load_task("synthetic");
    auto shard = std::make_shared<Dataset>(take_shard(std::move(task.train), ShardSpec{static_cast<int>(k + 1), 4}, Partition{}, 9));
    TrainerConfig tc;
    tc.model = "mlp:16";
    tc.batch = 32;
    tc.schedule.base_lr = 0.002;
    tc.seed = 9;
    Trainer real(tc, shard, shard->dim, 10);
    auto sim = w.make_peer(k, 0);
    REQUIRE(sim->params().size() == real.params().size());
    for (int step = 0; step < 30; ++step) {
      real.step();
      sim->compute_gradient();
      sim->apply_gradient();
    }
    CHECK(std::memcmp(sim->params().data(), real.params().data(), real.params().size() * sizeof(float)) == 0);
    CHECK(sim->samples() == real.samples());
  }
}

TEST_CASE("workload: workload.init = torch starts and trains every peer as rumor-peer --init torch does") {
  const Scenario s = parse_scenario(
      "[run]\npeers = 2\nseed = 9\n[workload]\ndata = synthetic\nmodel = mlp:16\ninit = torch\nbatch = 32\n",
      "t.ini", {});
  CHECK(s.init == InitScheme::Torch);
  Workload w(s, 2);
  Task task = load_task("synthetic");
  auto shard = std::make_shared<Dataset>(take_shard(std::move(task.train), ShardSpec{2, 2}, Partition{}, 9));
  TrainerConfig tc;
  tc.model = "mlp:16";
  tc.batch = 32;
  tc.seed = 9;
  tc.init = InitScheme::Torch;
  Trainer real(tc, shard, shard->dim, 10);
  tc.init = InitScheme::He;
  Trainer he(tc, shard, shard->dim, 10);
  auto sim = w.make_peer(1, 0);
  REQUIRE(sim->params().size() == real.params().size());
  const auto bytes = real.params().size() * sizeof(float);
  CHECK(std::memcmp(sim->params().data(), real.params().data(), bytes) == 0);
  CHECK(std::memcmp(he.params().data(), real.params().data(), bytes) != 0);
  for (int step = 0; step < 10; ++step) {
    real.step();
    sim->compute_gradient();
    sim->apply_gradient();
  }
  CHECK(std::memcmp(sim->params().data(), real.params().data(), bytes) == 0);
}

TEST_CASE("workload: the wsd schedule decays over the peer's run, as rumor-peer --lr-schedule wsd") {
  const Scenario s = parse_scenario(
      "[run]\npeers = 2\n[workload]\ndata = synthetic\nmodel = logreg\nlr = 0.01\nschedule = wsd\n"
      "decay_fraction = 0.5\nsteps = 40\n",
      "t.ini", {});
  Workload w(s, 2);
  const ScheduleConfig sc = w.schedule_config(1);
  CHECK(sc.kind == "wsd");
  CHECK(sc.total_steps == 40);
  CHECK(learning_rate(sc, 19) == doctest::Approx(0.01));
  CHECK(learning_rate(sc, 30) == doctest::Approx(0.005));
  CHECK_THROWS_WITH_AS(parse_scenario("[run]\npeers = 2\n[workload]\nschedule = wsd\ndecay_fraction = 2\n", "t.ini", {}),
                       doctest::Contains("workload.decay_fraction"), std::exception);
}

TEST_CASE("workload: adopting a step (state transfer) moves the step count, as Trainer::adopt_step does") {
  const Scenario s = parse_scenario("[run]\npeers = 2\n[workload]\ndata = synthetic\nmodel = logreg\nbatch = 100\n", "t.ini", {});
  Workload w(s, 2);
  auto p = w.make_peer(1, 0);
  p->adopt_step(120);
  CHECK(p->steps() == 120);
  CHECK(p->epochs_done() == 0);  // epochs count this peer's own samples
}

TEST_CASE("workload: the noisy quadratic and pure averaging") {
  const Scenario q = parse_scenario(
      "[run]\npeers = 3\nduration = 1\n[workload]\nkind = quadratic\ndim = 4\ncurvature = 0.5..2\nlr = 0.1\nnoise = 0\nx0 = 2\n",
      "t.ini", {});
  Workload w(q, 3);
  CHECK(w.curvature().front() == doctest::Approx(0.5));
  CHECK(w.curvature().back() == doctest::Approx(2));
  auto p = w.make_peer(0, 0);
  p->compute_gradient();
  p->apply_gradient();
  CHECK(p->params()[0] == doctest::Approx(2 * (1 - 0.1 * 0.5)));  // no noise: plain gradient descent
  CHECK(w.evaluate(p->params()).loss > 0);
  const Scenario off = parse_scenario("[run]\npeers = 3\nduration = 1\n[workload]\nkind = quadratic\ntraining = off\ndim = 4\n", "t.ini", {});
  Workload wo(off, 3);
  auto a = wo.make_peer(0, 0), b = wo.make_peer(1, 0);
  CHECK(a->params()[0] != b->params()[0]);  // every peer starts elsewhere
}
