// The metrics file: one JSON object per line, each with "t" (seconds since the peer started)
// and "event". docs/metrics.md documents every event and field. Thread-safe; every line is
// flushed so a crash loses nothing already written.
#pragma once
#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>
#include <variant>

namespace rumor::peer {

class MetricsWriter {
 public:
  using Value = std::variant<double, std::int64_t, std::uint64_t, std::string, bool>;
  struct Field {
    const char* key;
    Value value;
  };
  MetricsWriter() = default;
  // Opens (truncates) `path`; throws std::runtime_error naming the path on failure.
  // An empty path makes a writer that drops everything.
  // `append`: keep what the file has (a resumed peer continues its own file).
  explicit MetricsWriter(const std::string& path, bool append = false);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const char* event, std::initializer_list<Field> fields);
  double elapsed() const;  // seconds since construction
  bool enabled() const { return f_ != nullptr; }

 private:
  std::FILE* f_ = nullptr;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};


}  // namespace rumor::peer
