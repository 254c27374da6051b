// Loading data sets from disk: the one place that reads data files, so core/ stays pure.
#pragma once
#include <string>

#include "core/dataset.hpp"

namespace rumor {

// The directory holds train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]. Throws DataError: a missing
// directory names the Debian package (dataset-fashion-mnist) and `--data synthetic`; a missing,
// corrupt or truncated file is named with the reason.
Task load_idx_directory(const std::string& dir);

// "synthetic": a 10-class Gaussian mixture in 64 dimensions (16,000 train / 4,000 test rows),
// hard enough that training matters; the same for every peer of a swarm.
Task synthetic_task();

// `spec` is a directory or "synthetic".
Task load_task(const std::string& spec);

}  // namespace rumor
