// Writing (temporary file, fsync, rename) and reading checkpoints, whose format is in
// checkpoint.hpp, and --resume's search for the newest valid one in a directory. The daemon
// decides when to write them.
#include "peer/checkpoint.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/message.hpp"  // Bytes
#include "core/serial.hpp"

namespace rumor {
template <class A>
void serialize(A& ar, TrainingPosition& p) {
  ar(p.step, p.epoch, p.batch_pos, p.samples);
}
}  // namespace rumor

namespace rumor::peer {

namespace fs = std::filesystem;

template <class A>
void serialize(A& ar, Checkpoint& c) {
  ar(c.fingerprint, c.position, c.optimizer_steps, c.params, c.optimizer_state, c.view);
}

namespace {
constexpr char kMagic[8] = {'R', 'M', 'R', 'C', 'K', 'P', 'T', '1'};
constexpr std::uint32_t kVersion = 1;
constexpr int kKeep = 3;

void write_all(int fd, const void* p, std::size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("writing checkpoint " + path + ": " + std::strerror(errno));
    }
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

std::uint64_t step_of(const fs::path& p) {
  const std::string s = p.filename().string();  // ckpt-000000001234.rkpt
  try {
    return std::stoull(s.substr(5, s.size() - 10));
  } catch (...) {
    return 0;
  }
}
}  // namespace

std::string write_checkpoint(const std::string& dir, const Checkpoint& c) {
  fs::create_directories(dir);
  const Bytes body = encode_struct(c);
  const std::string name = fmt::format("ckpt-{:012}.rkpt", c.position.step);
  const std::string path = (fs::path(dir) / name).string();
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create checkpoint " + tmp + ": " + std::strerror(errno));
  try {
    const std::uint64_t len = body.size();
    const auto crc = static_cast<std::uint32_t>(::crc32(0L, body.data(), static_cast<uInt>(body.size())));
    write_all(fd, kMagic, sizeof kMagic, tmp);
    write_all(fd, &kVersion, sizeof kVersion, tmp);
    write_all(fd, &len, sizeof len, tmp);
    write_all(fd, body.data(), body.size(), tmp);
    write_all(fd, &crc, sizeof crc, tmp);
    if (::fsync(fd) != 0) throw std::runtime_error("fsync of checkpoint " + tmp + ": " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("renaming checkpoint " + tmp + ": " + std::strerror(errno));
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);  // the rename itself is durable
    ::close(dfd);
  }
  // Keep the newest few.
  std::vector<fs::path> all;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".rkpt") all.push_back(e.path());
  std::sort(all.begin(), all.end(), [](const fs::path& a, const fs::path& b) { return step_of(a) > step_of(b); });
  for (std::size_t i = kKeep; i < all.size(); ++i) fs::remove(all[i]);
  return path;
}

Checkpoint read_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t head = sizeof kMagic + sizeof(std::uint32_t) + sizeof(std::uint64_t);
  if (bytes.size() < head + sizeof(std::uint32_t)) throw std::runtime_error("truncated (" + std::to_string(bytes.size()) + " bytes)");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) throw std::runtime_error("not a Rumor checkpoint (bad magic)");
  std::uint32_t version;
  std::uint64_t len;
  std::memcpy(&version, bytes.data() + sizeof kMagic, 4);
  std::memcpy(&len, bytes.data() + sizeof kMagic + 4, 8);
  if (version != kVersion) throw std::runtime_error("checkpoint format " + std::to_string(version) + ", we read " + std::to_string(kVersion));
  if (len != bytes.size() - head - 4) throw std::runtime_error("truncated: header says " + std::to_string(len) + " body bytes, file has " + std::to_string(bytes.size() - head - 4));
  const auto* body = reinterpret_cast<const std::uint8_t*>(bytes.data() + head);
  std::uint32_t crc;
  std::memcpy(&crc, bytes.data() + head + len, 4);
  if (crc != static_cast<std::uint32_t>(::crc32(0L, body, static_cast<uInt>(len)))) throw std::runtime_error("checksum mismatch (corrupt)");
  return decode_struct<Checkpoint>({body, static_cast<std::size_t>(len)}, "checkpoint");
}

std::optional<Checkpoint> load_newest_checkpoint(const std::string& dir, const std::string& fingerprint,
                                                 spdlog::logger& log, std::string* chosen) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::vector<fs::path> all;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".rkpt") all.push_back(e.path());
  std::sort(all.begin(), all.end(), [](const fs::path& a, const fs::path& b) { return step_of(a) > step_of(b); });
  for (const auto& p : all) {
    try {
      Checkpoint c = read_checkpoint(p.string());
      if (c.fingerprint != fingerprint) {
        log.warn("checkpoint {} is of another model ({}): skipped", p.string(), c.fingerprint);
        continue;
      }
      if (chosen) *chosen = p.string();
      return c;
    } catch (const std::exception& e) {
      log.warn("checkpoint {} is unusable ({}): skipped", p.string(), e.what());
    }
  }
  return std::nullopt;
}

int verify_checkpoints(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::fprintf(stderr, "rumor-peer: --verify-checkpoints %s: not a directory\n", dir.c_str());
    return 2;
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".rkpt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  int bad = 0;
  for (const auto& f : files) {
    try {
      const Checkpoint c = read_checkpoint(f.string());
      const auto finite = [](const std::vector<float>& v) {
        return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
      };
      if (!finite(c.params) || !finite(c.optimizer_state)) {
        std::printf("bad %s: a parameter or optimizer value is not finite\n", f.c_str());
        ++bad;
        continue;
      }
      std::printf("ok %s step %llu params %zu optimizer %zu view %zu\n", f.c_str(),
                  static_cast<unsigned long long>(c.position.step), c.params.size(), c.optimizer_state.size(),
                  c.view.size());
    } catch (const std::exception& e) {
      std::printf("bad %s: %s\n", f.c_str(), e.what());
      ++bad;
    }
  }
  if (files.empty()) std::printf("no checkpoint in %s\n", dir.c_str());
  std::fflush(stdout);
  return files.empty() || bad ? 1 : 0;
}

}  // namespace rumor::peer
