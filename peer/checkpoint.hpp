// Durable checkpoints of one peer: parameters, optimizer state, training position and view.
//
// File DIR/ckpt-<step>.rkpt: "RMRCKPT1" | u32 format version | u64 body length | body (Cereal
// binary) | u32 CRC-32 of the body. Written atomically: to a .tmp file, fsync, rename, fsync
// of the directory, so a crash at any moment leaves either the previous checkpoints or a
// complete new one (a stray .tmp is ignored). The newest 3 are kept.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/trainer.hpp"

namespace spdlog {
class logger;
}

namespace rumor::peer {

struct Checkpoint {
  std::string fingerprint;
  TrainingPosition position;
  std::uint64_t optimizer_steps = 0;
  std::vector<float> params;
  std::vector<float> optimizer_state;
  std::vector<std::string> view;  // members alive at the time, to rejoin through
};

// Throws std::runtime_error naming the file on an I/O error.
std::string write_checkpoint(const std::string& dir, const Checkpoint& c);
// Parses one file; throws std::runtime_error with the reason if it is truncated or corrupt.
Checkpoint read_checkpoint(const std::string& path);
// The newest valid checkpoint for this model in `dir`; corrupt, partial or foreign ones are
// reported (warn) and skipped.
std::optional<Checkpoint> load_newest_checkpoint(const std::string& dir, const std::string& fingerprint,
                                                 spdlog::logger& log, std::string* path = nullptr);

// rumor-peer --verify-checkpoints DIR: reads every .rkpt file in `dir` and checks that every
// parameter and optimizer value is finite; one line per file on stdout ("ok PATH step N ..." or
// "bad PATH: reason"). Returns the exit code: 0 when there is at least one and all are good, 1
// otherwise (2: `dir` is not a directory).
int verify_checkpoints(const std::string& dir);

}  // namespace rumor::peer
