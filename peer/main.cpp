// rumor-peer: parse flags, set up logging and signals, run the daemon, map errors to exit
// codes (0 done or left gracefully, 2 bad usage or bad input files, 1 anything else).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>

#include "data/dataset.hpp"
#include "peer/checkpoint.hpp"
#include "peer/config.hpp"
#include "peer/daemon.hpp"

namespace {
rumor::peer::Daemon* g_daemon = nullptr;  // only for the signal handler
extern "C" void on_signal(int) {
  if (g_daemon) g_daemon->request_stop();
}
}  // namespace

int main(int argc, char** argv) {
  auto parsed = rumor::peer::parse_command_line(argc, argv);
  if (!parsed.config) return parsed.exit_code;
  rumor::peer::Config cfg = *parsed.config;
  if (!cfg.verify_checkpoints.empty()) return rumor::peer::verify_checkpoints(cfg.verify_checkpoints);

  auto log = spdlog::stderr_color_mt(cfg.name.empty() ? "peer" : cfg.name);
  log->set_level(spdlog::level::from_str(cfg.log_level));
  log->set_pattern("%H:%M:%S.%e [%n] %^%l%$ %v");
  spdlog::set_default_logger(log);

  try {
    rumor::peer::Daemon daemon(cfg, log);
    g_daemon = &daemon;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    const int rc = daemon.run();
    g_daemon = nullptr;
    return rc;
  } catch (const rumor::DataError& e) {
    log->error("{}", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    log->error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 1;
  }
}
