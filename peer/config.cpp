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
  app.add_option("--partition", c.partition, "How shards are drawn: iid or dirichlet:ALPHA")
      ->group(g_data)->capture_default_str();

  auto* g_model = "Model and optimizer";
  app.add_option("--model", c.model, "mlp:W1[,W2...] (ReLU hidden layers), logreg or linreg")
      ->group(g_model)->capture_default_str();
  app.add_option("--optimizer", c.optimizer.kind, "adam, adamw or sgd")
      ->group(g_model)->check(CLI::IsMember({"adam", "adamw", "sgd"}))->capture_default_str();
  app.add_option("--lr", c.schedule.base_lr, "Learning rate")
      ->group(g_model)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--lr-schedule", c.schedule.kind, "constant, warmup or cosine")
      ->group(g_model)->check(CLI::IsMember({"constant", "warmup", "cosine"}))->capture_default_str();
  app.add_option("--warmup-steps", c.schedule.warmup_steps, "Linear warm-up steps (warmup, cosine)")
      ->group(g_model)->capture_default_str();
  app.add_option("--min-lr", c.schedule.min_lr, "Final learning rate of the cosine schedule")
      ->group(g_model)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--momentum", c.optimizer.momentum, "SGD momentum")
      ->group(g_model)->check(CLI::Range(0.0, 0.999999))->capture_default_str();
  app.add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum (sgd)")->group(g_model);
  app.add_option("--weight-decay", c.optimizer.weight_decay, "L2 (sgd, adam) or decoupled (adamw) weight decay")
      ->group(g_model)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batch", c.batch, "Mini-batch size")
      ->group(g_model)->check(CLI::Range(1, 1 << 20))->capture_default_str();

  auto* g_stop = "When to stop (the first reached)";
  app.add_option("--epochs", c.epochs, "Passes over this peer's shard")
      ->group(g_stop)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", c.steps, "Local optimizer steps (overrides --epochs)")->group(g_stop);
  app.add_option("--duration", c.duration_s, "Wall-clock seconds (overrides --epochs)")
      ->group(g_stop)->check(CLI::PositiveNumber);
  app.add_option("--eval-every", c.eval_every,
                 "Evaluate on the test set every STEPS local steps (default: once per epoch; always at start and end)")
      ->group(g_stop);

  auto* g_dev = "Compute";
  app.add_option("--device", c.device, "Where the math runs: cpu")->group(g_dev)->capture_default_str();
  app.add_option("--threads", c.threads, "Math threads")->group(g_dev)->check(CLI::Range(1, 256))->capture_default_str();

  auto* g_misc = "Output";
  app.add_option("--seed", c.seed, "Seed of every random choice (init, shards, batches)")
      ->group(g_misc)->capture_default_str();
  app.add_option("--metrics", c.metrics_path, "Write JSON-lines metrics here (docs/metrics.md)")->group(g_misc);
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error")
      ->group(g_misc)->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--name", c.name, "Name of this peer in logs (default: its address)")->group(g_misc);
  app.set_version_flag("--version", "rumor-peer 0.1.0");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return {std::nullopt, rc == 0 ? 0 : 2};
  }
  if (app.count("--steps") || app.count("--duration")) {
    if (!app.count("--epochs")) c.epochs = 0;  // explicit step/time budgets replace the default
  }
  return {c, 0};
}

}  // namespace rumor::peer
