// The scenario INI reader: the raw pass of scenario parsing (scenario.cpp is the typed pass).
// It knows the syntax (sections, `key = value`, `# comments`, top-level `include = FILE`,
// `[class.NAME]` and `[sweep]` sections, `--set section.key=value` overrides) and which keys
// exist, and keeps every value with the place it came from (file:line or --set) for the error
// messages; it knows nothing of what a value means. Also here: the conversions of one value to a
// number, flag, integer or string, and values with units (parse_duration, parse_bandwidth,
// declared in scenario.hpp). Not here: reading keys into a Scenario (scenario.cpp).
#pragma once
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "sim/scenario.hpp"

namespace rumor::sim::ini {

// Throws ScenarioError("WHERE: KEY: WHAT").
[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what);
// Without leading and trailing blanks.
std::string trim(const std::string& s);
// Split at blanks.
std::vector<std::string> words(const std::string& s);

// A value and the place it came from (file:line, or --set #N).
struct RawValue {
  std::string value, where;
};

// The known keys, defined with the typed builder that reads them (scenario.cpp). Keys of list
// kind append; all others keep the last value.
extern const std::set<std::string> kListKeys;
extern const std::set<std::string> kClassKeys;                            // of [class.NAME]
extern const std::map<std::string, std::set<std::string>> kKeys;          // section -> keys

// The raw entries of a scenario: full key ("section.key") -> its values in order.
class Raw {
 public:
  std::map<std::string, std::vector<RawValue>> entries;
  std::vector<std::string> class_order;  // [class.NAME] sections in order of appearance
  std::vector<std::string> sweep_order;  // [sweep] axes in order of appearance

  void set(const std::string& section, const std::string& key, const std::string& value, const std::string& where);
  // One file's text (`name` in messages; includes relative to `base_dir`); depth counts includes.
  void parse_text(const std::string& text, const std::string& name, const std::string& base_dir, int depth);
  void set_class_seen(const std::string& name, const std::string& where);
  // `--set` number `index` (0-based): "section.key=value".
  void apply_override(const std::string& o, int index);

  const RawValue* last(const std::string& key) const;  // the value in force, or null
  std::vector<RawValue> all(const std::string& key) const;

 private:
  static std::string listing(const std::set<std::string>& keys);
};

// A number; with `unit`, what follows it goes there, otherwise anything after it is an error.
double to_number(const std::string& v, const std::string& where, const std::string& key, std::string* unit);

// One value converted to the type of `out`, or ScenarioError naming `where` and `key`.
void convert(const std::string& v, const std::string& where, const std::string& key, double& out);
void convert(const std::string& v, const std::string& where, const std::string& key, std::string& out);
void convert(const std::string& v, const std::string& where, const std::string& key, bool& out);
template <class I>
  requires std::is_integral_v<I>
void convert(const std::string& v, const std::string& where, const std::string& key, I& out) {
  long long x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size()) {
    // Allow 1e3-style integers.
    const double d = to_number(v, where, key, nullptr);
    if (d != std::floor(d) || std::fabs(d) > 9e15) fail(where, key, "expected an integer, got '" + v + "'");
    x = static_cast<long long>(d);
  }
  if (x < 0) fail(where, key, "expected a non-negative integer, got '" + v + "'");
  out = static_cast<I>(x);
}

}  // namespace rumor::sim::ini
