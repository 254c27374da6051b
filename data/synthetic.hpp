// Synthetic tasks drawn from a seed (train and test from the same generator): problems for
// tests, the simulator and `--data synthetic` that need no files. Not the choice between files
// and "synthetic" (load_task, files.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "data/dataset.hpp"

namespace rumor {

// `classes` Gaussian clusters in `dim` dimensions, means on a sphere of radius `separation`,
// unit variance.
Task gaussian_mixture_task(std::size_t train_rows, std::size_t test_rows, std::size_t dim,
                           int classes, double separation, std::uint64_t seed);
// y = W x + b + noise (target_dim outputs), x standard normal.
Task linear_regression_task(std::size_t train_rows, std::size_t test_rows, std::size_t dim,
                            std::size_t target_dim, double noise_sd, std::uint64_t seed);
// "synthetic": a 10-class Gaussian mixture in 64 dimensions (16,000 train / 4,000 test rows),
// hard enough that training matters; the same for every peer of a swarm.
Task synthetic_task();

}  // namespace rumor
