// MetricsWriter (metrics.hpp): --metrics lines, one compact JSON object each, written under a
// lock and flushed at once. Which events exist and their fields is docs/metrics.md.
#include "peer/metrics.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace rumor::peer {

MetricsWriter::MetricsWriter(const std::string& path, bool append) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f_) throw std::runtime_error("cannot write metrics file '" + path + "': " + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

double MetricsWriter::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void MetricsWriter::write(const char* event, std::initializer_list<Field> fields) {
  if (!f_) return;
  nlohmann::ordered_json j;
  j["t"] = std::round(elapsed() * 1e4) / 1e4;  // 0.1 ms is plenty, and keeps lines short
  j["event"] = event;
  for (const Field& f : fields) std::visit([&](const auto& v) { j[f.key] = v; }, f.value);
  // One line of compact JSON; NaN and Inf come out as null (JSON has neither), invalid UTF-8
  // in a string (a peer's reason text) as U+FFFD.
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lk(mu_);
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace rumor::peer
