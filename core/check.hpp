// Invariant checks. A broken invariant is a bug: it stops loudly with file:line.
// (Peer and network failures are not invariants: the protocol reacts to them as errors.)
#pragma once
#include <stdexcept>
#include <string>

namespace rumor {

struct InvariantError : std::logic_error {
  using std::logic_error::logic_error;
};

[[noreturn]] inline void invariant_failed(const char* expr, const char* file, int line,
                                          const std::string& what) {
  throw InvariantError(std::string(file) + ":" + std::to_string(line) + ": invariant `" + expr +
                       "` failed" + (what.empty() ? "" : ": " + what));
}

}  // namespace rumor

#define RUMOR_CHECK(cond, ...)                                                        \
  do {                                                                                \
    if (!(cond)) ::rumor::invariant_failed(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)
