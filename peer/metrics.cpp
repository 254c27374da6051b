#include "peer/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace rumor::peer {

std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 2);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += ch;
        }
    }
  }
  return o;
}

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
  std::string line;
  char buf[64];
  std::snprintf(buf, sizeof buf, "{\"t\":%.4f,\"event\":\"", elapsed());
  line += buf;
  line += event;
  line += '"';
  for (const Field& f : fields) {
    line += ",\"";
    line += f.key;
    line += "\":";
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, double>) {
            if (std::isfinite(v)) {
              // Large values (wall-clock times, byte counts as doubles) keep millisecond digits.
              std::snprintf(buf, sizeof buf, std::abs(v) >= 1e6 ? "%.3f" : "%.6g", v);
              line += buf;
            } else {
              line += "null";  // JSON has no NaN/Inf
            }
          } else if constexpr (std::is_same_v<T, std::string>) {
            line += '"' + json_escape(v) + '"';
          } else if constexpr (std::is_same_v<T, bool>) {
            line += v ? "true" : "false";
          } else {
            line += std::to_string(v);
          }
        },
        f.value);
  }
  line += "}\n";
  std::lock_guard<std::mutex> lk(mu_);
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace rumor::peer
