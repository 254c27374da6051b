// Checks for the bench programs' CLI11 options whose errors say what was wrong, e.g.
// "--reps: needs a positive number, got '0'" (CLI11 2.1's PositiveNumber prints the bounds of
// its range instead). Integer options still reject a fraction when CLI11 converts the value.
#pragma once
#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace rumor::bench {

inline CLI::Validator number_at_least_zero(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& v) -> std::string {
        double x = NAN;
        if (CLI::detail::lexical_cast(v, x) && std::isfinite(x) && (x > 0 || (zero_allowed && x == 0))) return "";
        return std::string("needs a ") + (zero_allowed ? "non-negative" : "positive") + " number, got '" + v + "'";
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}
inline CLI::Validator positive() { return number_at_least_zero(false); }
inline CLI::Validator non_negative() { return number_at_least_zero(true); }

}  // namespace rumor::bench
