// Churn sampling (see churn.hpp).
#include "sim/churn.hpp"

namespace rumor::sim {

std::vector<double> poisson_times(Rng& r, double rate, double from, double until) {
  std::vector<double> times;
  for (double t = from + r.exponential(rate); t < until; t += r.exponential(rate)) times.push_back(t);
  return times;
}

}  // namespace rumor::sim
