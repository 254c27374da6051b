// Command line and config file of rumor-peer (CLI11). Flag names are part of the product: see
// ../shared/INTERFACE.md and README.md.
#include "peer/config.hpp"

#include <CLI/CLI.hpp>
#include <iostream>

namespace rumor::peer {


ParseResult parse_command_line(int argc, char** argv) {
  Config c;
  CLI::App app{
      "rumor-peer: one peer of a decentralized gossip trainer.\n"
      "Trains a model on its shard of the data and reports progress on stderr."};
  app.set_config("--config", "", "Read flags from a TOML/INI config file (CLI flags override it)");
  app.get_formatter()->column_width(38);
  // Bad flags: the error, the usage line and where to find more (not the whole help).
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return std::string("rumor-peer: ") + e.what() + "\nUsage: " + a->get_name() +
           " [OPTIONS]   (rumor-peer --help lists every flag)\n";
  });

  auto* g_data = "Data";
  app.add_option("--data", c.data, "IDX directory (Fashion-MNIST layout), or 'synthetic'")
      ->group(g_data)->capture_default_str();
  app.add_option("--shard", c.shard, "This peer's share of the training set, K/N")
      ->group(g_data)->capture_default_str();
  app.add_option("--partition", c.partition, "How shards are drawn: iid, dirichlet:ALPHA or labels:K (K classes per shard)")
      ->group(g_data)->capture_default_str();

  auto* g_model = "Model and optimizer";
  app.add_option("--model", c.model, "mlp:W1[,W2...] (ReLU hidden layers), logreg, linreg, or cnn:[iHxWxC,]TOKEN,... with TOKEN cNkK[sS][pP] (N KxK filters, stride S, padding P, ReLU), pK (KxK max pool) or fN (dense ReLU layer), e.g. cnn:c32k5,p2,c64k5,p2,f1024; input HxWxC defaults to a square single-channel image")
      ->group(g_model)->capture_default_str();
  app.add_option("--optimizer", c.optimizer.kind, "adam, adamw or sgd")
      ->group(g_model)->check(CLI::IsMember({"adam", "adamw", "sgd"}))->capture_default_str();
  app.add_option("--lr", c.schedule.base_lr, "Learning rate")
      ->group(g_model)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--lr-schedule", c.schedule.kind,
                 "constant, warmup, cosine (down to --min-lr over the run's steps) or wsd (held, then linear down "
                 "to --min-lr over the last --decay-fraction of the run's steps)")
      ->group(g_model)->check(CLI::IsMember({"constant", "warmup", "cosine", "wsd"}))->capture_default_str();
  app.add_option("--warmup-steps", c.schedule.warmup_steps, "Linear warm-up steps (warmup, cosine, wsd)")
      ->group(g_model)->capture_default_str();
  app.add_option("--min-lr", c.schedule.min_lr, "Final learning rate of the cosine and wsd schedules")
      ->group(g_model)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--decay-fraction", c.schedule.decay_fraction, "wsd: the part of the run's steps that decays")
      ->group(g_model)->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--momentum", c.optimizer.momentum, "SGD momentum")
      ->group(g_model)->check(CLI::Range(0.0, 0.999999))->capture_default_str();
  app.add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum (sgd)")->group(g_model);
  app.add_option("--weight-decay", c.optimizer.weight_decay, "L2 (sgd, adam) or decoupled (adamw) weight decay")
      ->group(g_model)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batch", c.batch, "Mini-batch size")
      ->group(g_model)->check(CLI::Range(1, 1 << 20))->capture_default_str();

  auto* g_stop = "When to stop (the first reached)";
  app.add_option("--epochs", c.loop.epochs, "Passes over this peer's shard")
      ->group(g_stop)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", c.loop.steps, "Local optimizer steps (overrides --epochs)")->group(g_stop);
  app.add_option("--duration", c.loop.duration_s, "Wall-clock seconds (overrides --epochs)")
      ->group(g_stop)->check(CLI::PositiveNumber);
  app.add_option("--eval-every", c.loop.eval_every,
                 "Evaluate on the test set every STEPS local steps (default: once per epoch; always at start and end)")
      ->group(g_stop);

  auto* g_net = "Network and gossip";
  app.add_option("--listen", c.listen, "Where to accept peers, HOST:PORT (port 0 picks a free one and logs it)")
      ->group(g_net)->capture_default_str();
  app.add_option("--join", c.join, "Any live members to join through, HOST:PORT[,HOST:PORT...] (none: start a new swarm)")
      ->group(g_net)->delimiter(',');
  app.add_option("--join-timeout", c.loop.gossip.join_timeout_s,
                 "Keep retrying the --join list (every second) this long for a member to answer, then exit 1; "
                 "a peer listed in its own --join list starts the swarm instead (cluster peers start in any order)")
      ->group(g_net)->check(CLI::Range(0.01, 1e9))->capture_default_str();
  app.add_option("--local-steps", c.loop.gossip.local_steps, "Exchange parameters every H local steps")
      ->group(g_net)->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))->capture_default_str();
  app.add_option("--mix-weight", c.mix_weight, "Averaging weights: uniform, or samples (by samples processed)")
      ->group(g_net)->check(CLI::IsMember({"uniform", "samples"}))->capture_default_str();
  app.add_option("--exchange-timeout", c.loop.gossip.exchange_timeout_s, "Seconds an exchange may take before it is given up")
      ->group(g_net)->check(CLI::Range(0.01, 3600.0))->capture_default_str();
  app.add_option("--suspect-timeout", c.loop.gossip.suspect_timeout_s,
                 "Seconds a suspected peer has to refute before it is declared dead")
      ->group(g_net)->check(CLI::Range(0.01, 3600.0))->capture_default_str();

  app.add_option("--settle", c.loop.settle_s,
                 "After training, keep averaging with neighbours (no training) for up to SEC seconds, so the "
                 "peers finish close to the swarm's average model; 0 disables")
      ->group(g_net)->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--settle-max", c.loop.settle_max_s,
                 "While a peer in the view is still training (behind our step count), settle up to SEC seconds, so "
                 "the last to finish still has neighbours to average with (at least --settle)")
      ->group(g_net)->check(CLI::Range(0.0, 86400.0))->capture_default_str();

  app.add_option("--probe-interval", c.loop.gossip.probe_interval_s,
                 "SWIM failure detector period: a silent peer is probed, then suspected, then dead after --suspect-timeout")
      ->group(g_net)->check(CLI::Range(0.01, 60.0))->capture_default_str();
  app.add_option("--min-peers", c.loop.min_peers,
                 "Start training only when this many peers (this one included) are in the view (peers starting a swarm "
                 "together: they share the initialisation, so no state transfer)")
      ->group(g_net)->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--min-peers-timeout", c.loop.min_peers_timeout_s, "Train anyway after waiting this long for --min-peers")
      ->group(g_net)->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  std::string staleness = "inf";
  app.add_option("--staleness", staleness,
                 "Bounded staleness TAU: never start a step more than TAU steps ahead of the slowest live peer, "
                 "never mix a model more than TAU steps apart; 0 = lockstep, inf = fully asynchronous")
      ->group(g_net)->capture_default_str();
  app.add_option("--codec", c.codec, "Parameter encoding on the wire: none, fp16, int8, or topk (sparse residuals with error feedback, docs/ARCHITECTURE.md)")
      ->group(g_net)->check(CLI::IsMember({"none", "fp16", "int8", "topk"}))->capture_default_str();

  auto* g_tune = "Protocol tuning (defaults suit most runs; rumor-sim's gossip.* keys of the same names)";
  app.add_option("--probe-timeout", c.loop.gossip.probe_timeout_s,
                 "Seconds a SWIM ping has before indirect probes (default: min(0.25, --probe-interval / 2))")
      ->group(g_tune)->check(CLI::Range(0.001, 60.0));
  app.add_option("--max-in-flight", c.loop.gossip.max_in_flight, "Exchanges this peer may have open at once (1 or 2; core/gossip.hpp says why not more)")
      ->group(g_tune)->check(CLI::Range(1, 2))->capture_default_str();
  app.add_option("--stream-exchanges", c.loop.gossip.stream_exchanges,
                 "Send the request header before the parameters, so the reply travels meanwhile (false: one-shot exchanges)")
      ->group(g_tune)->capture_default_str();
  app.add_option("--topk-fraction", c.loop.gossip.topk_fraction, "--codec topk: fraction of the coordinates averaged per exchange")
      ->group(g_tune)->check(CLI::Range(1e-6, 1.0))->capture_default_str();
  app.add_option("--failure-backoff", c.loop.gossip.failure_backoff_s, "Skip a peer whose exchange failed for SEC x failures (capped at 8x)")
      ->group(g_tune)->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--suspect-after", c.loop.gossip.suspect_after_failures, "Suspect a peer after this many failed exchanges in a row")
      ->group(g_tune)->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--join-retry", c.loop.gossip.join_retry_s, "Seconds between join requests to the --join members until one answers")
      ->group(g_tune)->check(CLI::Range(0.01, 600.0))->capture_default_str();
  app.add_option("--digest-limit", c.loop.gossip.digest_limit, "Members piggybacked on every message (membership gossip)")
      ->group(g_tune)->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--state-timeout", c.loop.gossip.state_timeout_s, "Seconds a state-transfer chunk may take before another member is asked")
      ->group(g_tune)->check(CLI::Range(0.01, 3600.0))->capture_default_str();
  app.add_option("--leave-timeout", c.loop.gossip.leave_timeout_s, "Seconds a leaving peer waits for one member to take its model before trying another")
      ->group(g_tune)->check(CLI::Range(0.01, 3600.0))->capture_default_str();
  app.add_option("--state-wait", c.loop.state_wait_s,
                 "A joiner that has not received the swarm's model after SEC seconds trains from its own initialisation")
      ->group(g_tune)->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  app.add_option("--leave-wait", c.loop.leave_wait_s, "On SIGTERM, exit after SEC seconds even if no member took the model")
      ->group(g_tune)->check(CLI::Range(0.0, 3600.0))->capture_default_str();

  auto* g_trust = "Trust (docs/security.md)";
  app.add_option("--swarm-key", c.swarm_key_path,
                 "Secret shared by the swarm's members (a file of at least 16 bytes, e.g. head -c 32 /dev/urandom "
                 "> swarm.key): every connection must prove it (HMAC-SHA256 challenge-response). Without it the "
                 "swarm is open")
      ->group(g_trust);
  app.add_option("--tls-cert", c.tls_cert, "TLS 1.3: this peer's certificate (PEM), signed by --tls-ca")->group(g_trust);
  app.add_option("--tls-key", c.tls_key, "TLS 1.3: the private key of --tls-cert (PEM)")->group(g_trust);
  app.add_option("--tls-ca", c.tls_ca, "TLS 1.3: the CA certificate (PEM) every member's certificate must be signed by")
      ->group(g_trust);
  app.add_flag("--robust", c.loop.gossip.robust.enabled,
               "Robust mixing: a neighbour's model far beyond the distances the swarm has been showing is clipped, "
               "or refused (non-finite parameters are always refused)")
      ->group(g_trust);
  app.add_option("--robust-clip", c.loop.gossip.robust.clip_factor, "With --robust: clip beyond this many typical distances")
      ->group(g_trust)->check(CLI::Range(1.0, 1e6))->capture_default_str();
  app.add_option("--robust-refuse", c.loop.gossip.robust.refuse_factor,
                 "With --robust: refuse beyond this many typical distances (0: never refuse, only clip)")
      ->group(g_trust)->check(CLI::Range(0.0, 1e12))->capture_default_str();

  auto* g_dev = "Compute";
  app.add_option("--device", c.device,
                 "Where the math runs: cpu (Eigen), or cuda / cuda:N (GPU N, in builds with the CUDA backend); "
                 "emulated: the CPU's math through a GPU peer's data flow (separate memory, copies), for tests")
      ->group(g_dev)
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "cpu" || v == "cuda" || v == "emulated") return {};
            if (v.rfind("cuda:", 0) == 0 && v.size() > 5 && v.size() <= 8 &&
                v.find_first_not_of("0123456789", 5) == std::string::npos)
              return {};
            return "expected cpu, cuda or cuda:N, got '" + v + "'";
          },
          "cpu|cuda[:N]", "device"))
      ->capture_default_str();
  app.add_option("--threads", c.threads, "Math threads")->group(g_dev)->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--throttle", c.throttle, "Run F times slower (emulates a slower machine on one box)")
      ->group(g_dev)->check(CLI::Range(1.0, 1000.0))->capture_default_str();

  auto* g_ckpt = "Checkpoints";
  app.add_option("--checkpoint", c.checkpoint_dir, "Write checkpoints (model, optimizer, position, view) into DIR")
      ->group(g_ckpt);
  app.add_option("--checkpoint-every", c.checkpoint_every_s, "Seconds between checkpoints")
      ->group(g_ckpt)->check(CLI::Range(0.01, 1e6))->capture_default_str();
  app.add_flag("--resume", c.resume, "Restart from the newest valid checkpoint in --checkpoint DIR and rejoin")
      ->group(g_ckpt);

  auto* g_misc = "Output";
  app.add_option("--seed", c.seed, "Seed of every random choice (init, shards, batches)")
      ->group(g_misc)->capture_default_str();
  app.add_option("--metrics", c.metrics_path, "Write JSON-lines metrics here (docs/metrics.md)")->group(g_misc);
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error")
      ->group(g_misc)->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--name", c.name, "Name of this peer in log lines")->group(g_misc);
  app.add_option("--init-seed", c.init_seed,
                 "Seed of the initial parameters only (default: --seed; every peer of a swarm normally shares it)")
      ->group(g_misc);
  app.add_option("--save-params", c.save_params_path,
                 "At the end, write the parameters to this file as raw little-endian float32 (layout: docs/wire.md)")
      ->group(g_misc);
  app.set_version_flag("--version", "rumor-peer 0.1.0");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return {std::nullopt, rc == 0 ? 0 : 2};
  }
  if (app.count("--steps") || app.count("--duration")) {
    if (!app.count("--epochs")) c.loop.epochs = 0;  // explicit step/time budgets replace the default
  }
  if (c.resume && c.checkpoint_dir.empty()) {
    std::cerr << "rumor-peer: --resume needs --checkpoint DIR\nUsage: rumor-peer [OPTIONS]   (rumor-peer --help lists every flag)\n";
    return {std::nullopt, 2};
  }
  try {
    if (staleness == "inf" || staleness == "infinity") {
      c.loop.gossip.staleness = INFINITY;
    } else {
      std::size_t pos = 0;
      double v = -1;
      try {
        v = std::stod(staleness, &pos);
      } catch (...) {
      }
      if (pos != staleness.size() || !(v >= 0) || !std::isfinite(v) || v != std::floor(v))
        throw std::invalid_argument("bad --staleness '" + staleness + "': expected a whole number of steps >= 0, or inf");
      c.loop.gossip.staleness = v;
    }
    c.loop.gossip.codec = parse_codec(c.codec);
    c.loop.gossip.mix_weight = c.mix_weight == "samples" ? MixWeight::Samples : MixWeight::Uniform;
    const int tls_given = !c.tls_cert.empty() + !c.tls_key.empty() + !c.tls_ca.empty();
    if (tls_given != 0 && tls_given != 3)
      throw std::invalid_argument("TLS needs all three of --tls-cert, --tls-key and --tls-ca");
    if (c.loop.gossip.robust.refuse_factor != 0 && c.loop.gossip.robust.refuse_factor < c.loop.gossip.robust.clip_factor)
      throw std::invalid_argument("--robust-refuse must be 0 or at least --robust-clip");
    parse_host_port(c.listen, "--listen", true);
    for (const auto& j : c.join) parse_host_port(j, "--join", false);
  } catch (const std::invalid_argument& e) {
    std::cerr << "rumor-peer: " << e.what() << "\nUsage: rumor-peer [OPTIONS]   (rumor-peer --help lists every flag)\n";
    return {std::nullopt, 2};
  }
  return {c, 0};
}

std::string HostPort::str() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HostPort parse_host_port(const std::string& s, const char* flag, bool allow_zero) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(std::string("bad ") + flag + " '" + s + "': " + why +
                                 " (expected HOST:PORT, e.g. 127.0.0.1:7000)");
  };
  HostPort hp;
  std::string port;
  if (!s.empty() && s[0] == '[') {
    const auto close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') throw bad("unterminated [IPv6]");
    hp.host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos) throw bad("no port");
    hp.host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (hp.host.empty()) throw bad("no host");
  for (unsigned char ch : hp.host)
    if (ch <= ' ' || ch == ',' || ch >= 0x7F) throw bad("the host has a space, comma or control character");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    throw bad("port is not a number");
  const unsigned long p = std::stoul(port);
  if (p > 65535 || (p == 0 && !allow_zero)) throw bad("port out of range");
  hp.port = static_cast<std::uint16_t>(p);
  return hp;
}

}  // namespace rumor::peer
