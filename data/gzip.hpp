// Inflating gzip'd data files (Fashion-MNIST ships as .gz) from bytes in memory, with a bound on
// the output so that a gzip bomb cannot exhaust memory. Not a general compression library: it
// only inflates, and reading the file is files.hpp's job.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace rumor {

using Bytes = std::vector<std::uint8_t>;  // same alias as core/message.hpp

// Inflates gzip data (magic 1f 8b); returns other bytes unchanged. `source` names the file
// in errors.
Bytes gunzip_if_needed(std::span<const std::uint8_t> bytes, const std::string& source);
// Inflating stops with DataError past this many bytes, so a gzip bomb cannot exhaust memory
// (the largest Fashion-MNIST file inflates to 47 MB).
constexpr std::size_t kMaxInflatedBytes = std::size_t{1} << 30;
// The same with an explicit output bound (tests use a small one).
Bytes gunzip_if_needed(std::span<const std::uint8_t> bytes, const std::string& source,
                       std::size_t max_inflated_bytes);

}  // namespace rumor
