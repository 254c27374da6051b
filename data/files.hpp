// Loading data sets from disk: the one place in Rumor that reads data files (data/ and core/
// stay free of I/O otherwise; .ci/check-core-purity exempts only files.cpp). Decoding is not
// here: bytes go to gzip.hpp and idx.hpp.
#pragma once
#include <string>

#include "data/dataset.hpp"

namespace rumor {

// The directory holds train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]. Throws DataError: a missing
// directory names the Debian package (dataset-fashion-mnist) and `--data synthetic`; a missing,
// corrupt or truncated file is named with the reason.
Task load_idx_directory(const std::string& dir);

// `spec` is a directory or "synthetic" (synthetic_task(), synthetic.hpp).
Task load_task(const std::string& spec);

}  // namespace rumor
