// Optimizers against steps computed by hand, and the schedules at their edges.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/optimizer.hpp"

using namespace rumor;

TEST_CASE("optimizer: SGD with momentum and weight decay matches hand-computed steps") {
  OptimizerConfig c;
  c.kind = "sgd";
  c.momentum = 0.5;
  c.weight_decay = 0.1;
  auto o = make_optimizer(c, 1);
  std::vector<float> p{1.0f}, g{2.0f};
  o->step(p, g, 0.1);  // g' = 2 + 0.1*1 = 2.1; v = 2.1; p = 1 - 0.21 = 0.79
  CHECK(p[0] == doctest::Approx(0.79));
  o->step(p, g, 0.1);  // g' = 2 + 0.079 = 2.079; v = 1.05 + 2.079 = 3.129; p = 0.79 - 0.3129
  CHECK(p[0] == doctest::Approx(0.4771));
  CHECK(o->steps() == 2);
}

TEST_CASE("optimizer: Nesterov SGD matches hand-computed steps") {
  OptimizerConfig c;
  c.kind = "sgd";
  c.momentum = 0.9;
  c.nesterov = true;
  auto o = make_optimizer(c, 1);
  std::vector<float> p{0.0f}, g{1.0f};
  o->step(p, g, 1.0);  // v = 1; p -= 1 + 0.9 = 1.9
  CHECK(p[0] == doctest::Approx(-1.9));
  o->step(p, g, 1.0);  // v = 1.9; p -= 1 + 1.71 = 2.71
  CHECK(p[0] == doctest::Approx(-4.61));
}

TEST_CASE("optimizer: plain SGD without momentum keeps no state") {
  OptimizerConfig c;
  c.kind = "sgd";
  c.momentum = 0;
  auto o = make_optimizer(c, 3);
  CHECK(o->state().empty());
  std::vector<float> p{1, 2, 3}, g{1, 1, 1};
  o->step(p, g, 0.5);
  CHECK(p == std::vector<float>{0.5f, 1.5f, 2.5f});
}

TEST_CASE("optimizer: Adam's first steps match the formula") {
  OptimizerConfig c;
  auto o = make_optimizer(c, 2);
  std::vector<float> p{1.0f, -1.0f}, g{0.5f, -2.0f};
  o->step(p, g, 0.01);
  // Step 1: mhat = g, vhat = g^2, update = lr * g/|g| (eps negligible).
  CHECK(p[0] == doctest::Approx(0.99));
  CHECK(p[1] == doctest::Approx(-0.99));
  std::vector<float> g2{1.0f, 0.0f};
  o->step(p, g2, 0.01);
  // m = 0.9*0.05... computed in double:
  const double m = 0.9 * 0.1 * 0.5 + 0.1 * 1.0, v = 0.999 * 0.001 * 0.25 + 0.001 * 1.0;
  const double mh = m / (1 - 0.81), vh = v / (1 - 0.999 * 0.999);
  CHECK(p[0] == doctest::Approx(0.99 - 0.01 * mh / (std::sqrt(vh) + 1e-8)).epsilon(1e-5));
  CHECK(o->state().size() == 4);
}

TEST_CASE("optimizer: AdamW decays weights decoupled from the gradient") {
  OptimizerConfig c;
  c.kind = "adamw";
  c.weight_decay = 0.5;
  auto o = make_optimizer(c, 1);
  std::vector<float> p{2.0f}, g{0.0f};
  o->step(p, g, 0.1);  // zero gradient: only the decay acts: p *= 1 - 0.1*0.5
  CHECK(p[0] == doctest::Approx(1.9));
  OptimizerConfig l2 = c;
  l2.kind = "adam";
  auto o2 = make_optimizer(l2, 1);
  std::vector<float> q{2.0f};
  o2->step(q, g, 0.1);  // L2: gradient becomes 1.0, Adam step = lr
  CHECK(q[0] == doctest::Approx(1.9));
}

TEST_CASE("optimizer: state round-trips and bad settings are refused") {
  OptimizerConfig c;
  auto o = make_optimizer(c, 3);
  std::vector<float> p{1, 2, 3}, g{1, -1, 0.5};
  o->step(p, g, 0.1);
  auto o2 = make_optimizer(c, 3);
  o2->set_state(o->state(), o->steps());
  std::vector<float> p2 = p;
  o->step(p, g, 0.1);
  o2->step(p2, g, 0.1);
  CHECK(p == p2);
  CHECK_THROWS_AS(o2->set_state(std::vector<float>(5), 1), std::invalid_argument);
  OptimizerConfig bad;
  bad.kind = "rmsprop";
  CHECK_THROWS_WITH_AS(make_optimizer(bad, 1), doctest::Contains("adam"), std::invalid_argument);
  bad.kind = "sgd";
  bad.momentum = 1.5;
  CHECK_THROWS_AS(make_optimizer(bad, 1), std::invalid_argument);
}

TEST_CASE("schedule: constant, warm-up and cosine at their edges") {
  ScheduleConfig s;
  s.base_lr = 0.1;
  CHECK(learning_rate(s, 0) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 1000000) == doctest::Approx(0.1));
  s.kind = "warmup";
  s.warmup_steps = 10;
  CHECK(learning_rate(s, 0) == doctest::Approx(0.01));
  CHECK(learning_rate(s, 9) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 10) == doctest::Approx(0.1));
  s.kind = "cosine";
  s.total_steps = 110;
  s.min_lr = 0.001;
  CHECK(learning_rate(s, 4) == doctest::Approx(0.05));
  CHECK(learning_rate(s, 10) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 60) == doctest::Approx(0.001 + 0.5 * 0.099));
  CHECK(learning_rate(s, 110) == doctest::Approx(0.001));
  CHECK(learning_rate(s, 5000) == doctest::Approx(0.001));
  s.warmup_steps = 0;
  CHECK(learning_rate(s, 0) == doctest::Approx(0.1));
  ScheduleConfig bad;
  bad.kind = "step";
  CHECK_THROWS_AS(validate(bad), std::invalid_argument);
  bad.kind = "constant";
  bad.base_lr = -1;
  CHECK_THROWS_AS(validate(bad), std::invalid_argument);
}

TEST_CASE("schedule: wsd holds the rate, then decays linearly to min_lr over the last decay_fraction") {
  // The same numbers as examples/torch_quickstart.py's torch schedule (LambdaLR): held until
  // round(0.3 x 100) = 30 steps before the end, then (100 - step) / 30 of the rate.
  ScheduleConfig s;
  s.kind = "wsd";
  s.base_lr = 0.1;
  s.total_steps = 100;
  validate(s);
  CHECK(learning_rate(s, 0) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 69) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 70) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 85) == doctest::Approx(0.05));
  CHECK(learning_rate(s, 99) == doctest::Approx(0.1 / 30));
  CHECK(learning_rate(s, 100) == doctest::Approx(0.0));
  CHECK(learning_rate(s, 5000) == doctest::Approx(0.0));
  s.min_lr = 0.01;  // decays to min_lr, not 0
  CHECK(learning_rate(s, 85) == doctest::Approx(0.01 + 0.09 * 0.5));
  CHECK(learning_rate(s, 100) == doctest::Approx(0.01));
  s.min_lr = 0;
  s.warmup_steps = 80;  // a decay that would start inside the warm-up starts after it
  CHECK(learning_rate(s, 0) == doctest::Approx(0.1 / 80));
  CHECK(learning_rate(s, 79) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 90) == doctest::Approx(0.05));
  s.warmup_steps = 0;
  s.decay_fraction = 0;  // no decay: constant until the end
  CHECK(learning_rate(s, 99) == doctest::Approx(0.1));
  s.decay_fraction = 1;  // decay from the first step
  CHECK(learning_rate(s, 0) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 50) == doctest::Approx(0.05));
  s.decay_fraction = 0.3;  // a half-way decay length rounds up: 211.5 -> 212 steps (tests/python: the same)
  s.total_steps = 705;
  CHECK(learning_rate(s, 492) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 493) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 494) == doctest::Approx(0.1 * 211 / 212));
  CHECK(learning_rate(s, 704) == doctest::Approx(0.1 / 212));
  s.decay_fraction = 1.5;
  CHECK_THROWS_AS(validate(s), std::invalid_argument);
  s.decay_fraction = -0.1;
  CHECK_THROWS_AS(validate(s), std::invalid_argument);
}
