// Running rumor-peer processes from tests: spawn with stderr to a file, wait with a deadline
// (a test never hangs: on timeout the process is killed and the test fails), read its log and
// metrics.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace rumor::test {

inline std::string peer_binary() { return std::string(RUMOR_BINARY_DIR) + "/peer/rumor-peer"; }

inline std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("rumor-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Process {
 public:
  Process(const std::vector<std::string>& args, const std::filesystem::path& log) : Process(peer_binary(), args, log) {}
  // Another program than rumor-peer (e.g. the trust tests' rumor-evil-peer).
  Process(const std::string& binary, const std::vector<std::string>& args, const std::filesystem::path& log) : log_(log) {
    std::vector<std::string> full{binary};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Process() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Exit code, or nullopt if it did not end within `timeout_s` (it is then killed; -SIG for
  // a signal).
  std::optional<int> wait(double timeout_s) {
    if (status_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    status_ = -SIGKILL;
    return std::nullopt;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  bool running() {
    if (status_) return false;
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      return false;
    }
    return true;
  }
  std::string log() const { return read_text(log_); }
  // Waits for "listening on HOST:PORT" in the log and returns HOST:PORT.
  std::string listen_address(double timeout_s = 30) {
    const std::regex re("listening on ([0-9.]+:[0-9]+)");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string s = log();
      if (std::regex_search(s, m, re)) return m[1];
      if (!running()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// The metrics file's lines of one event kind, as raw JSON text.
inline std::vector<std::string> metric_lines(const std::filesystem::path& p, const std::string& event) {
  std::vector<std::string> out;
  std::ifstream in(p);
  std::string line;
  const std::string key = "\"event\":\"" + event + "\"";
  while (std::getline(in, line))
    if (line.find(key) != std::string::npos) out.push_back(line);
  return out;
}

// Polls until `pred` holds or `timeout_s` passes; returns the seconds it took, or -1.
template <class F>
double wait_until(F pred, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pred()) return t;
    if (t > timeout_s) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// A numeric field of one JSON line (flat objects only).
inline double field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const auto pos = line.find(k);
  if (pos == std::string::npos) return NAN;
  return std::strtod(line.c_str() + pos + k.size(), nullptr);
}

}  // namespace rumor::test
