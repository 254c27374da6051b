// The scenario INI reader and value conversions (see ini.hpp).
#include "sim/ini.hpp"

#include "core/knobs.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

namespace rumor::sim {
namespace ini {

[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what) {
  throw ScenarioError(where + ": " + key + ": " + what);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

void Raw::set(const std::string& section, const std::string& key, const std::string& value, const std::string& where) {
  std::string full;
  if (section == "sweep") {
    // [sweep]: `target` and `parallel` configure it; any other key is an axis of the grid,
    // checked against the known keys when the grid is built. Axes keep their file order.
    full = "sweep." + key;
    if (key != "target" && key != "parallel") {
      auto it = std::find(sweep_order.begin(), sweep_order.end(), key);
      if (it == sweep_order.end()) sweep_order.push_back(key);
    }
    auto& v = entries[full];
    v.clear();
    v.push_back({value, where});
    return;
  }
  if (section.rfind("class.", 0) == 0) {
    const std::string name = section.substr(6);
    if (name.empty() || name.find_first_of(" .,|") != std::string::npos)
      fail(where, "[" + section + "]", "a class name is one word without '.', ',' or '|'");
    if (!kClassKeys.count(key)) fail(where, section + "." + key, "unknown key of a [class.*] section" + listing(kClassKeys));
    if (std::find(class_order.begin(), class_order.end(), name) == class_order.end()) class_order.push_back(name);
    full = section + "." + key;
  } else {
    auto s = kKeys.find(section);
    if (s == kKeys.end())
      fail(where, "[" + section + "]", "unknown section (known: run, algorithm, workload, gossip, network, compute, class.NAME, churn, output, sweep)");
    if (!s->second.count(key)) fail(where, section + "." + key, "unknown key" + listing(s->second));
    full = section + "." + key;
  }
  auto& v = entries[full];
  if (!kListKeys.count(full)) v.clear();
  v.push_back({value, where});
}

void Raw::parse_text(const std::string& text, const std::string& name, const std::string& base_dir, int depth) {
  if (depth > 8) fail(name, "include", "includes nested more than 8 deep (a cycle?)");
  std::istringstream in(text);
  std::string line, section;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string where = name + ":" + std::to_string(n);
    if (auto h = line.find('#'); h != std::string::npos) line.erase(h);
    line = trim(line);
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']') fail(where, line, "a section header is [name]");
      section = trim(line.substr(1, line.size() - 2));
      if (section.rfind("class.", 0) == 0) {
        set_class_seen(section.substr(6), where);
      } else if (!kKeys.count(section) && section != "sweep") {
        fail(where, "[" + section + "]", "unknown section (known: run, algorithm, workload, gossip, network, compute, class.NAME, churn, output, sweep)");
      }
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) fail(where, line, "expected `key = value`");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key.empty()) fail(where, line, "missing key before '='");
    if (section.empty()) {
      if (key != "include") fail(where, key, "keys before the first [section] must be `include = FILE`");
      const std::string path = value.size() && value[0] == '/' ? value : base_dir + "/" + value;
      std::ifstream f(path);
      if (!f) fail(where, "include", "cannot read '" + path + "'");
      std::stringstream ss;
      ss << f.rdbuf();
      const auto slash = path.find_last_of('/');
      parse_text(ss.str(), path, slash == std::string::npos ? "." : path.substr(0, slash), depth + 1);
      continue;
    }
    set(section, key, value, where);
  }
}

void Raw::set_class_seen(const std::string& name, const std::string& where) {
  if (name.empty() || name.find_first_of(" .,|") != std::string::npos)
    fail(where, "[class." + name + "]", "a class name is one word without '.', ',' or '|'");
  if (name == "all" || name == "rest" || name == "random" || (name.size() > 1 && name[0] == 'p' && std::isdigit(static_cast<unsigned char>(name[1]))))
    fail(where, "[class." + name + "]", "this name is reserved for peer sets");
  if (std::find(class_order.begin(), class_order.end(), name) == class_order.end()) class_order.push_back(name);
}

void Raw::apply_override(const std::string& o, int index) {
  const std::string where = "--set #" + std::to_string(index + 1) + " (" + o + ")";
  const auto eq = o.find('=');
  if (eq == std::string::npos) fail(where, o, "expected section.key=value");
  const std::string path = trim(o.substr(0, eq)), value = trim(o.substr(eq + 1));
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos || dot == 0) fail(where, path, "expected section.key (for example network.latency)");
  if (path.rfind("sweep.", 0) == 0 && path.size() > 6) {  // sweep.peers, sweep.gossip.topology
    set("sweep", path.substr(6), value, where);
    return;
  }
  const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
  if (section.rfind("class.", 0) == 0) set_class_seen(section.substr(6), where);
  set(section, key, value, where);
}

const RawValue* Raw::last(const std::string& key) const {
  auto it = entries.find(key);
  return it == entries.end() || it->second.empty() ? nullptr : &it->second.back();
}
std::vector<RawValue> Raw::all(const std::string& key) const {
  auto it = entries.find(key);
  return it == entries.end() ? std::vector<RawValue>{} : it->second;
}

std::string Raw::listing(const std::set<std::string>& keys) {
  std::string s = " (known here:";
  for (const auto& k : keys) s += " " + k;
  return s + ")";
}

double to_number(const std::string& v, const std::string& where, const std::string& key, std::string* unit) {
  double x = 0;
  const char* b = v.data();
  const char* e = v.data() + v.size();
  auto [p, ec] = std::from_chars(b, e, x);
  if (ec != std::errc() || !std::isfinite(x)) fail(where, key, "expected a number, got '" + v + "'");
  std::string rest = trim(std::string(p, e));
  if (unit) *unit = rest;
  else if (!rest.empty()) fail(where, key, "expected a plain number, got '" + v + "'");
  return x;
}

void convert(const std::string& v, const std::string& where, const std::string& key, double& out) {
  out = to_number(v, where, key, nullptr);
}
void convert(const std::string& v, const std::string& where, const std::string& key, std::string& out) {
  if (v.empty()) fail(where, key, "empty value");
  out = v;
}
void convert(const std::string& v, const std::string& where, const std::string& key, bool& out) {
  if (v == "on" || v == "true" || v == "yes" || v == "1") out = true;
  else if (v == "off" || v == "false" || v == "no" || v == "0") out = false;
  else fail(where, key, "expected on or off, got '" + v + "'");
}

}  // namespace ini

using ini::fail;
using ini::to_number;

// Durations are read by core's parser (core/knobs.hpp), as rumor-peer's flags are.
double parse_duration(const std::string& v, const std::string& where, const std::string& key) {
  double x = 0;
  try {
    x = parse_seconds(v);
  } catch (const KnobError& e) {
    fail(where, key, e.what());
  }
  if (!std::isfinite(x)) fail(where, key, "expected a number, got '" + v + "'");
  return x;
}

double parse_bandwidth(const std::string& v, const std::string& where, const std::string& key) {
  std::string u;
  double x = to_number(v, where, key, &u);
  if (!u.empty() && u.back() == 's' && u.size() > 1 && u[u.size() - 2] == '/') u.resize(u.size() - 2);  // "MB/s"
  if (u.size() >= 3 && u.substr(u.size() - 3) == "bps") u = u.substr(0, u.size() - 3) + "bit";
  static const std::map<std::string, double> f = {
      {"", 1},        {"B", 1},         {"KB", 1e3},       {"MB", 1e6},      {"GB", 1e9},
      {"bit", 0.125}, {"Kbit", 125},    {"Mbit", 1.25e5},  {"Gbit", 1.25e8}, {"kbit", 125},
      {"KiB", 1024},  {"MiB", 1048576}, {"GiB", 1073741824.0}};
  auto it = f.find(u);
  if (it == f.end()) fail(where, key, "unknown bandwidth unit '" + u + "' (bytes/s, or B, KB, MB, GB, Kbit, Mbit, Gbit)");
  x *= it->second;
  if (!(x > 0)) fail(where, key, "a bandwidth must be > 0, got '" + v + "'");
  return x;
}

}  // namespace rumor::sim
