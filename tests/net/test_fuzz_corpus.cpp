// Replays the fuzz corpus (fuzz/corpus/<target>/) and every input that once broke something
// (fuzz/regressions/<target>/) through the fuzz targets' bodies (fuzz/targets.hpp), compiled
// normally: what the fuzzer found stays fixed in the ordinary test run, with or without clang.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/targets.hpp"

namespace fs = std::filesystem;

namespace {

std::size_t replay(const fs::path& dir, const rumor::fuzz::Target& t) {
  if (!fs::is_directory(dir)) return 0;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(t.name << ": " << f.string());
    CHECK(t.run(bytes.data(), bytes.size()) == 0);  // a crash or a broken property aborts the binary
  }
  return files.size();
}

}  // namespace

TEST_CASE("fuzz: the seed corpus and every regression input run clean through the fuzz targets") {
  const fs::path root = fs::path(RUMOR_SOURCE_DIR) / "fuzz";
  std::size_t seeds = 0, regressions = 0;
  for (const auto& t : rumor::fuzz::kTargets) {
    const std::size_t n = replay(root / "corpus" / t.name, t);
    INFO(t.name);
    CHECK(n > 0);  // every target has seeds
    seeds += n;
    regressions += replay(root / "regressions" / t.name, t);
  }
  MESSAGE(seeds << " seeds and " << regressions << " regression inputs replayed");
}

TEST_CASE("fuzz: empty and one-byte inputs") {
  for (const auto& t : rumor::fuzz::kTargets) {
    CHECK(t.run(nullptr, 0) == 0);
    for (int b = 0; b < 256; ++b) {
      const std::uint8_t byte = static_cast<std::uint8_t>(b);
      CHECK(t.run(&byte, 1) == 0);
    }
  }
}
