// Command line and config file of rumor-peer (CLI11). Flag names are part of the product
// (README.md, docs/flags.md); the loop's knobs come from core/knobs.hpp.
#include "peer/config.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <string_view>
#include <vector>

#include "core/knobs.hpp"
#include "core/model.hpp"
#include "net/address.hpp"

namespace rumor::peer {

namespace {
std::vector<std::string> init_scheme_names() {
  std::vector<std::string> out;
  for (const InitSchemeName& s : init_schemes()) out.push_back(s.name);
  return out;
}
}  // namespace

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
  app.add_option("--init", c.init,
                 "How the model's parameters start: he (He-normal before ReLU, Xavier-uniform output layer, zero "
                 "biases) or torch (PyTorch's nn.Linear/nn.Conv2d default: uniform in +-1/sqrt(fan-in), biases too); "
                 "every peer of a swarm normally shares it, like --init-seed")
      ->group(g_model)->check(CLI::IsMember(init_scheme_names()))->capture_default_str();
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

  // Every knob of the loop and the protocol comes from core's table (core/knobs.hpp): its flag,
  // help, default, range and parser; the same table gives rumor-sim its keys and rumor.Peer its
  // keywords. --listen and --join, which are not knobs, open the "Network and gossip" group.
  const auto add_knobs = [&](bool stop_group) {
    for (const Knob& k : loop_knobs()) {
      if (!(k.scope & Knob::kDaemon) || (std::string_view(k.group) == Knob::kStopGroup) != stop_group)
        continue;
      const std::string flag = knob_flag(k);
      std::string help = k.help;
      if (k.unit[0] && std::string_view(k.unit) != "s") help += fmt::format(" [{}]", k.unit);
      CLI::Option* o;
      if (k.type == Knob::Type::Bool) {
        o = app.add_flag(flag, *std::get<bool*>(k.field(c.loop)), help);  // --robust, --robust=false
      } else {
        const Knob* kp = &k;
        o = app.add_option_function<std::string>(
            flag,
            [kp, flag, &c](const std::string& v) {
              try {
                set_knob(*kp, c.loop, v);
              } catch (const KnobError& e) {
                throw CLI::ValidationError(flag, e.what());
              }
            },
            help);
        o->type_name(k.type == Knob::Type::Seconds     ? "SEC"
                     : k.type == Knob::Type::Choice    ? k.choices
                     : k.type == Knob::Type::Staleness ? "TAU|inf"
                     : k.type == Knob::Type::Count     ? "N"
                                                       : "X");
      }
      o->group(k.group)->default_str(k.default_text ? k.default_text : knob_value(k, c.loop));
    }
  };
  add_knobs(true);

  auto* g_net = "Network and gossip";
  app.add_option("--listen", c.listen, "Where to accept peers, HOST:PORT (port 0 picks a free one and logs it)")
      ->group(g_net)->capture_default_str();
  app.add_option("--join", c.join, "Any live members to join through, HOST:PORT[,HOST:PORT...] (none: start a new swarm)")
      ->group(g_net)->delimiter(',');
  add_knobs(false);

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
  app.add_option("--verify-checkpoints", c.verify_checkpoints,
                 "Read every checkpoint in DIR (whole, checksummed, every parameter finite), print one line each, "
                 "and exit: 0 when all are good, 1 otherwise (no training)")
      ->group(g_ckpt);

  auto* g_misc = "Output";
  app.add_option("--seed", c.seed, "Seed of every random choice (init, shards, batches)")
      ->group(g_misc)->capture_default_str();
  app.add_option("--metrics", c.metrics_path, "Write JSON-lines metrics here (docs/metrics.md)")->group(g_misc);
  app.add_option("--metrics-listen", c.metrics_listen,
                 "Serve HTTP on HOST:PORT: /metrics (Prometheus text format, series rumor_*), /status.json and / "
                 "(the live swarm page); port 0 picks a free one and logs it (docs/metrics.md)")
      ->group(g_misc);
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error")
      ->group(g_misc)->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--name", c.name, "Name of this peer in log lines, and the name= label of its /metrics series")->group(g_misc);
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
  apply_stop_precedence(c.loop, app.count("--epochs") > 0,
                        app.count("--steps") + app.count("--duration") + app.count("--swarm-epochs") +
                                app.count("--swarm-samples") > 0);
  if (c.resume && c.checkpoint_dir.empty()) {
    std::cerr << "rumor-peer: --resume needs --checkpoint DIR\nUsage: rumor-peer [OPTIONS]   (rumor-peer --help lists every flag)\n";
    return {std::nullopt, 2};
  }
  try {
    const int tls_given = !c.tls_cert.empty() + !c.tls_key.empty() + !c.tls_ca.empty();
    if (tls_given != 0 && tls_given != 3)
      throw std::invalid_argument("TLS needs all three of --tls-cert, --tls-key and --tls-ca");
    if (c.loop.gossip.robust.refuse_factor != 0 && c.loop.gossip.robust.refuse_factor < c.loop.gossip.robust.clip_factor)
      throw std::invalid_argument("--robust-refuse must be 0 or at least --robust-clip");
    if (const std::string why = knob_conflicts(c.loop); !why.empty()) throw std::invalid_argument(why);
    net::parse_host_port(c.listen, "--listen", true);
    if (!c.metrics_listen.empty()) net::parse_host_port(c.metrics_listen, "--metrics-listen", true);
    for (const auto& j : c.join) net::parse_host_port(j, "--join", false);
  } catch (const std::invalid_argument& e) {
    std::cerr << "rumor-peer: " << e.what() << "\nUsage: rumor-peer [OPTIONS]   (rumor-peer --help lists every flag)\n";
    return {std::nullopt, 2};
  }
  return {c, 0};
}

}  // namespace rumor::peer
