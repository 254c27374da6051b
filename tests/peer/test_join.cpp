// --join-timeout on real processes: a peer whose join list never answers exits 1 with a clear
// message within the deadline; a peer whose join list comes up late (cluster peers start in any
// order) joins it. Every wait is bounded.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "process.hpp"

using namespace rumor::test;

namespace {
// A loopback port nothing listens on (bound by the OS, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}
}  // namespace

TEST_CASE("join: --join to a dead address with --join-timeout 2 exits 1 with a clear message") {
  auto d = temp_dir("join-dead");
  const std::string dead = "127.0.0.1:" + std::to_string(free_port());
  const auto t0 = std::chrono::steady_clock::now();
  Process p({"--data", "synthetic", "--model", "logreg", "--duration", "5", "--join", dead, "--join-timeout", "2",
             "--metrics", (d / "m").string()},
            d / "log");
  const auto rc = p.wait(30);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = p.log();
  INFO(log);
  CHECK(rc == 1);
  CHECK(wall < 15);  // data loading + 2 s + a retry tick, with room for a busy machine
  CHECK(wall >= 2);
  CHECK(log.find("could not join through " + dead + " within 2 s: " + dead + ": ") != std::string::npos);
  CHECK(log.find("are the peers up? raise --join-timeout") != std::string::npos);
  CHECK(metric_lines(d / "m", "join_failed").size() == 1);
  CHECK(metric_lines(d / "m", "done").empty());  // it never trained
}

TEST_CASE("join: a peer started before its join list retries until the list comes up, then trains with it") {
  auto d = temp_dir("join-late");
  const std::string seed = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> common{"--data", "synthetic", "--model", "logreg", "--duration", "3",
                                        "--min-peers", "2", "--join-timeout", "30"};
  auto flags = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), {"--name", name, "--metrics", (d / name).string()});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Process joiner(flags("joiner", {"--join", seed, "--shard", "2/2"}), d / "joiner.log");
  std::this_thread::sleep_for(std::chrono::seconds(3));  // three retries into the void
  CHECK(joiner.running());
  Process first(flags("first", {"--listen", seed, "--shard", "1/2"}), d / "first.log");
  CHECK(first.wait(60) == 0);
  CHECK(joiner.wait(60) == 0);
  INFO(joiner.log());
  CHECK(joiner.log().find("joined the swarm through " + seed) != std::string::npos);
  const auto done = metric_lines(d / "joiner", "done");
  REQUIRE(done.size() == 1);
  CHECK(field(done[0], "exchanges") > 0);
}

TEST_CASE("join: a peer in its own join list whose co-founder is down starts the swarm after the timeout") {
  auto d = temp_dir("join-founder");
  const std::string self = "127.0.0.1:" + std::to_string(free_port());
  const std::string other = "127.0.0.1:" + std::to_string(free_port());
  Process p({"--data", "synthetic", "--model", "logreg", "--duration", "1", "--listen", self, "--join",
             self + "," + other, "--join-timeout", "2", "--metrics", (d / "m").string()},
            d / "log");
  CHECK(p.wait(30) == 0);
  const std::string log = p.log();
  INFO(log);
  CHECK(log.find("no other member of the join list answered within 2 s: this peer starts the swarm") !=
        std::string::npos);
  CHECK(metric_lines(d / "m", "done").size() == 1);
}
