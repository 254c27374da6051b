// One run, and sweeps of runs (sweep.hpp).
#include "sim/sweep.hpp"

#include "sim/invariants.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/model.hpp"
#include "sim/algorithms.hpp"

namespace rumor::sim {

namespace {

// A number for the CSV and Markdown tables: `precision` digits as printf's %g (type 'g') or
// decimals as %f (type 'f'); empty where it is not finite.
std::string num(double x, int precision = 6, char type = 'g') {
  if (!std::isfinite(x)) return "";
  return type == 'f' ? fmt::format("{:.{}f}", x, precision) : fmt::format("{:.{}g}", x, precision);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string o = "\"";
  for (char c : v) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

struct Stat {
  double mean = NAN, sd = NAN;
  std::size_t n = 0;
};
Stat stat(const std::vector<double>& v) {
  Stat s;
  s.n = v.size();
  if (v.empty()) return s;
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  double q = 0;
  for (double x : v) q += (x - m) * (x - m);
  s.mean = m;
  s.sd = v.size() > 1 ? std::sqrt(q / static_cast<double>(v.size() - 1)) : 0.0;
  return s;
}

}  // namespace

RunOutcome run_scenario(const Scenario& s, const std::string& dir, const std::function<void(const Simulation&)>& progress) {
  RunOutcome r;
  r.peers = s.founders;
  if (s.algorithm == Algorithm::Gossip) {
    Simulation sim(s);
    if (progress)
      sim.set_after_event([&progress, n = std::uint64_t{0}](const Simulation& x) mutable {
        if ((++n & 0xffff) == 0) progress(x);
      });
    if (const InvariantChecker* c = sim.invariants()) {
      // Under the checker a run that would never end (a liveness bug) stops at its bound.
      while (sim.now() <= c->run_bound() && sim.step()) {
      }
      if (c->first()) r.invariant = c->first()->line();
    } else {
      sim.run();
    }
    if (!dir.empty()) sim.write_outputs(dir);
    r.samples = sim.samples();
    r.totals = sim.totals();
    r.virtual_time = sim.now();
    r.peers = s.total_ids;
  } else {
    AlgorithmRun run(s);
    run.run();
    if (!dir.empty()) run.write_outputs(dir);
    r.samples = run.samples();
    r.totals = run.totals();
    r.virtual_time = run.now();
  }
  return r;
}

std::vector<SweepRun> expand_sweep(const std::string& path, const Scenario& base, const std::vector<std::string>& sets) {
  std::vector<SweepRun> runs;
  if (base.sweep.empty()) return runs;
  std::size_t total = 1;
  for (const auto& a : base.sweep) {
    total *= a.values.size();
    if (total > 100000) throw ScenarioError(a.where + ": sweep: more than 100,000 runs");
  }
  for (std::size_t k = 0; k < total; ++k) {
    SweepRun r;
    r.index = k;
    std::vector<std::string> overrides;
    std::size_t rest = k;
    std::vector<std::size_t> pick(base.sweep.size());
    for (std::size_t a = base.sweep.size(); a-- > 0;) {
      pick[a] = rest % base.sweep[a].values.size();
      rest /= base.sweep[a].values.size();
    }
    std::string label;
    for (std::size_t a = 0; a < base.sweep.size(); ++a) {
      r.values.push_back(base.sweep[a].values[pick[a]]);
      for (const auto& [key, value] : base.sweep[a].assignments[pick[a]]) overrides.push_back(key + "=" + value);
      label += (label.empty() ? "" : ", ") + base.sweep[a].label + "=" + r.values.back();
    }
    for (const auto& s : sets) overrides.push_back(s);
    try {
      r.scenario = load_scenario(path, overrides);
    } catch (const ScenarioError& e) {
      throw ScenarioError("sweep run " + std::to_string(k) + " (" + label + "): " + e.what());
    }
    r.name = fmt::format("{:03}", k);
    runs.push_back(std::move(r));
  }
  return runs;
}

TargetHit time_to_target(const RunOutcome& r, double target) {
  for (const Sample& x : r.samples)
    if (x.test_acc >= target) return {x.time, static_cast<double>(x.bytes) / std::max<std::uint32_t>(r.peers, 1)};
  return {};
}

std::string run_sweep(const Scenario& base, const std::vector<SweepRun>& runs, const std::string& out_dir,
                      const std::function<void(const SweepRun&, const RunOutcome&)>& progress) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(out_dir) / "runs", ec);
  if (ec) throw std::runtime_error("cannot create output directory '" + out_dir + "': " + ec.message());
  set_math_threads(1);  // before any thread starts (each run checks it, none writes it)
  std::vector<RunOutcome> out(runs.size());
  std::vector<std::string> errors(runs.size());
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::vector<std::size_t> finished;  // indices, in the order they finished (for progress)
  // Takes the next run, if any, and does it; false when none is left.
  const auto run_next = [&] {
    const std::size_t k = next.fetch_add(1);
    if (k >= runs.size()) return false;
    try {
      out[k] = run_scenario(runs[k].scenario, (fs::path(out_dir) / "runs" / runs[k].name).string());
    } catch (const std::exception& e) {
      errors[k] = e.what();
    }
    std::lock_guard<std::mutex> g(mu);
    finished.push_back(k);
    return true;
  };
  const auto worker = [&] {
    while (run_next()) {
    }
  };
  const std::size_t threads = std::min<std::size_t>(std::max<std::size_t>(base.sweep_parallel, 1), runs.size());
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  // The calling thread works too, and reports progress between its own runs.
  std::size_t reported = 0;
  const auto report = [&] {
    std::vector<std::size_t> now;
    {
      std::lock_guard<std::mutex> g(mu);
      now.assign(finished.begin() + static_cast<std::ptrdiff_t>(reported), finished.end());
      reported = finished.size();
    }
    if (progress)
      for (auto k : now)
        if (errors[k].empty()) progress(runs[k], out[k]);
  };
  while (run_next()) report();
  for (auto& t : pool) t.join();
  report();
  for (std::size_t k = 0; k < runs.size(); ++k)
    if (!errors[k].empty()) throw std::runtime_error("sweep run " + runs[k].name + ": " + errors[k]);

  // sweep.csv: every row of every run.
  std::string head = "run";
  for (const auto& a : base.sweep) head += "," + csv_field(a.label);
  std::string sweep_csv;
  {
    const std::string ts = timeseries_csv_of({});
    sweep_csv = head + "," + ts;  // ts ends with a newline
  }
  for (std::size_t k = 0; k < runs.size(); ++k) {
    std::string prefix = runs[k].name;
    for (const auto& v : runs[k].values) prefix += "," + csv_field(v);
    const std::string ts = timeseries_csv_of(out[k].samples);
    std::size_t pos = ts.find('\n') + 1;  // skip the header
    while (pos < ts.size()) {
      const std::size_t e = ts.find('\n', pos);
      sweep_csv += prefix + "," + ts.substr(pos, e - pos) + "\n";
      pos = e + 1;
    }
  }
  write_file((fs::path(out_dir) / "sweep.csv").string(), sweep_csv);

  // runs.csv: one row per run.
  std::string runs_csv = head + ",target,time_to_target,bytes_per_peer_to_target,final_test_acc,virtual_time,bytes_per_peer\n";
  std::vector<TargetHit> hits(runs.size());
  for (std::size_t k = 0; k < runs.size(); ++k) {
    hits[k] = time_to_target(out[k], base.sweep_target);
    const double final_acc = out[k].samples.empty() ? NAN : out[k].samples.back().test_acc;
    std::string row = runs[k].name;
    for (const auto& v : runs[k].values) row += "," + csv_field(v);
    row += "," + num(base.sweep_target) + "," + (hits[k].time >= 0 ? num(hits[k].time) : "") + "," +
           (hits[k].time >= 0 ? num(hits[k].bytes_per_peer) : "") + "," + num(final_acc, 4, 'f') + "," +
           num(out[k].virtual_time) + "," + num(static_cast<double>(out[k].totals.bytes) / std::max<std::uint32_t>(out[k].peers, 1));
    runs_csv += row + "\n";
  }
  write_file((fs::path(out_dir) / "runs.csv").string(), runs_csv);

  // summary: groups over every axis but the seed, in the order they first appear.
  std::vector<std::size_t> keep;
  for (std::size_t a = 0; a < base.sweep.size(); ++a)
    if (base.sweep[a].key != "run.seed") keep.push_back(a);
  std::vector<std::vector<std::string>> group_keys;
  std::map<std::vector<std::string>, std::vector<std::size_t>> groups;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    std::vector<std::string> g;
    for (auto a : keep) g.push_back(runs[k].values[a]);
    if (!groups.count(g)) group_keys.push_back(g);
    groups[g].push_back(k);
  }
  std::string sum_csv, md;
  for (auto a : keep) sum_csv += csv_field(base.sweep[a].label) + ",";
  sum_csv += "runs,reached,time_to_target_mean,time_to_target_sd,bytes_per_peer_to_target_mean,"
             "bytes_per_peer_to_target_sd,final_test_acc_mean,final_test_acc_sd,virtual_time_mean\n";
  md = "Target test accuracy " + num(base.sweep_target) + " (of the average model); mean ± sd over seeds.\n\n|";
  for (auto a : keep) md += " " + base.sweep[a].label + " |";
  md += " runs | reached | time to target (s) | MB per peer to target | final accuracy | virtual time (s) |\n|";
  for (std::size_t i = 0; i < keep.size() + 6; ++i) md += "---|";
  md += "\n";
  for (const auto& g : group_keys) {
    const auto& ks = groups[g];
    std::vector<double> t, b, acc, vt;
    for (auto k : ks) {
      if (hits[k].time >= 0) {
        t.push_back(hits[k].time);
        b.push_back(hits[k].bytes_per_peer);
      }
      if (!out[k].samples.empty()) acc.push_back(out[k].samples.back().test_acc);
      vt.push_back(out[k].virtual_time);
    }
    const Stat st = stat(t), sb = stat(b), sa = stat(acc), sv = stat(vt);
    for (const auto& v : g) sum_csv += csv_field(v) + ",";
    sum_csv += std::to_string(ks.size()) + "," + std::to_string(t.size()) + "," + num(st.mean) + "," + num(st.sd) + "," +
               num(sb.mean) + "," + num(sb.sd) + "," + num(sa.mean, 4, 'f') + "," + num(sa.sd, 4, 'f') + "," + num(sv.mean) + "\n";
    md += "|";
    for (const auto& v : g) md += " " + v + " |";
    const auto pm = [](const Stat& x, double scale, int precision, char type) {
      if (x.n == 0) return std::string("—");
      return num(x.mean * scale, precision, type) + " ± " + num(x.sd * scale, precision, type);
    };
    md += " " + std::to_string(ks.size()) + " | " + std::to_string(t.size()) + " | " + pm(st, 1, 3, 'g') + " | " +
          pm(sb, 1e-6, 3, 'g') + " | " + pm(sa, 1, 4, 'f') + " | " + pm(sv, 1, 4, 'g') + " |\n";
  }
  write_file((fs::path(out_dir) / "summary.csv").string(), sum_csv);
  write_file((fs::path(out_dir) / "summary.md").string(), md);
  return md;
}

}  // namespace rumor::sim
