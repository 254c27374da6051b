// Shards and partitions (see partition.hpp). Randomness comes only from an Rng seeded by the
// arguments, so two peers given the same seed compute the same split of the same data without
// talking to each other.
#include "data/partition.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <system_error>

#include "core/check.hpp"
#include "core/rng.hpp"

namespace rumor {
namespace {

// Streams forked from the partition seed, one per use, so adding a use shifts no other.
constexpr std::uint64_t kIidStream = 1;
constexpr std::uint64_t kDirichletStream = 2;
constexpr std::uint64_t kLabelsStream = 3;

// class by class: a peer with no rows cannot train, so each empty shard takes one row from the
// (first) largest (rows >= n, so that one has at least two whenever some shard is empty); then
// each shard is shuffled, so its row order carries no label order.
void finish_shards(std::vector<std::vector<std::size_t>>& parts, Rng& rng) {
  for (auto& part : parts) {
    if (!part.empty()) continue;
    auto largest = std::max_element(parts.begin(), parts.end(),
                                    [](const auto& a, const auto& b) { return a.size() < b.size(); });
    RUMOR_CHECK(largest->size() >= 2);
    part.push_back(largest->back());
    largest->pop_back();
  }
  for (auto& part : parts) rng.shuffle(part);
}

// `order` cut into n near-equal contiguous parts (the first size % n get one row more).
std::vector<std::vector<std::size_t>> cut_even(const std::vector<std::size_t>& order, int n) {
  std::vector<std::vector<std::size_t>> parts(static_cast<std::size_t>(n));
  const std::size_t base = order.size() / parts.size(), extra = order.size() % parts.size();
  std::size_t at = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::size_t len = base + (i < extra ? 1 : 0);
    parts[i].assign(order.begin() + static_cast<std::ptrdiff_t>(at),
                    order.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += len;
  }
  return parts;
}

}  // namespace

Partition Partition::parse(const std::string& spec) {
  auto bad = [&]() -> DataError {
    return DataError("bad --partition '" + spec +
                     "': expected 'iid', 'dirichlet:ALPHA' with ALPHA a finite number > 0, or 'labels:K'");
  };
  if (spec == "iid") return Partition{};
  if (spec.rfind("labels:", 0) == 0) {
    const char* first = spec.data() + 7;
    const char* last = spec.data() + spec.size();
    int k = 0;
    const auto [ptr, ec] = std::from_chars(first, last, k);
    if (first == last || ec != std::errc{} || ptr != last || k < 1)
      throw DataError("bad --partition '" + spec + "': labels:K needs an integer K >= 1");
    Partition p;
    p.kind = Kind::Labels;
    p.labels = k;
    return p;
  }
  const std::string prefix = "dirichlet:";
  if (spec.compare(0, prefix.size(), prefix) != 0) throw bad();
  const char* first = spec.data() + prefix.size();
  const char* last = spec.data() + spec.size();
  double alpha = 0;
  const auto [ptr, ec] = std::from_chars(first, last, alpha);
  if (first == last || ec != std::errc{} || ptr != last || !std::isfinite(alpha) || !(alpha > 0))
    throw bad();
  Partition p;
  p.kind = Kind::Dirichlet;
  p.alpha = alpha;
  return p;
}

std::string Partition::str() const {
  if (kind == Kind::Iid) return "iid";
  if (kind == Kind::Labels) return "labels:" + std::to_string(labels);
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, alpha);  // shortest round-trip
  RUMOR_CHECK(ec == std::errc{});
  return "dirichlet:" + std::string(buf, ptr);
}

ShardSpec ShardSpec::parse(const std::string& spec) {
  auto bad = [&]() -> DataError {
    return DataError("bad --shard '" + spec + "': expected K/N with 1 <= K <= N");
  };
  const auto slash = spec.find('/');
  if (slash == std::string::npos) throw bad();
  auto parse_int = [&](const char* first, const char* last) {
    int v = 0;
    const auto [ptr, ec] = std::from_chars(first, last, v);
    if (first == last || ec != std::errc{} || ptr != last) throw bad();
    return v;
  };
  ShardSpec s;
  s.k = parse_int(spec.data(), spec.data() + slash);
  s.n = parse_int(spec.data() + slash + 1, spec.data() + spec.size());
  if (s.k < 1 || s.k > s.n) throw bad();
  return s;
}

std::vector<std::vector<std::size_t>> partition_rows(const Dataset& d, int n, const Partition& p,
                                                     std::uint64_t seed) {
  d.check_shape();
  if (n < 1 || static_cast<std::size_t>(n) > d.rows)
    throw_data_error(d.name, "cannot split " + std::to_string(d.rows) + " rows into " +
                             std::to_string(n) + " shards (need 1 <= shards <= rows)");
  const Rng root(seed);

  if (p.kind == Partition::Kind::Iid || d.classes == 0) {
    std::vector<std::size_t> order(d.rows);
    std::iota(order.begin(), order.end(), std::size_t{0});
    Rng rng = root.fork(kIidStream);
    rng.shuffle(order);
    return cut_even(order, n);
  }

  if (!std::isfinite(p.alpha) || !(p.alpha > 0))
    throw_data_error(d.name, "Dirichlet alpha must be a finite number > 0, got " +
                             std::to_string(p.alpha));
  std::vector<std::vector<std::size_t>> by_class(static_cast<std::size_t>(d.classes));
  for (std::size_t r = 0; r < d.rows; ++r) {
    const auto c = d.labels[r];
    if (c < 0 || c >= d.classes)
      throw_data_error(d.name, "label " + std::to_string(c) + " at row " + std::to_string(r) +
                               " is outside 0.." + std::to_string(d.classes - 1));
    by_class[static_cast<std::size_t>(c)].push_back(r);
  }

  if (p.kind == Partition::Kind::Labels) {
    const auto C = static_cast<std::size_t>(d.classes), shards = static_cast<std::size_t>(n);
    const std::size_t K = std::min(static_cast<std::size_t>(std::max(p.labels, 1)), C);
    if (shards * K < C)
      throw_data_error(d.name, "labels:" + std::to_string(p.labels) + " over " + std::to_string(n) +
                               " shards holds " + std::to_string(shards * K) +
                               " class slots, fewer than the " + std::to_string(C) +
                               " classes (need shards * K >= classes)");
    Rng rng = root.fork(kLabelsStream);
    std::vector<std::vector<std::size_t>> perms;  // perm_r, drawn as slots need them
    const auto slot = [&](std::size_t s) {
      while (perms.size() <= s / C) {
        std::vector<std::size_t> pr(C);
        std::iota(pr.begin(), pr.end(), std::size_t{0});
        rng.shuffle(pr);
        perms.push_back(std::move(pr));
      }
      return perms[s / C][s % C];
    };
    std::vector<std::vector<std::size_t>> holders(C);
    for (std::size_t i = 0; i < shards; ++i) {
      std::vector<std::size_t> mine;
      for (std::size_t j = 0; j < K; ++j) {
        const std::size_t s = i * K + j;
        std::size_t c = slot(s);
        if (std::find(mine.begin(), mine.end(), c) != mine.end()) {
          // The next class of this slot's permutation that the shard lacks (K <= C: one exists).
          for (std::size_t t = 1; t <= C; ++t) {
            const std::size_t c2 = perms[s / C][(s + t) % C];
            if (std::find(mine.begin(), mine.end(), c2) == mine.end()) {
              c = c2;
              break;
            }
          }
        }
        mine.push_back(c);
        holders[c].push_back(i);
      }
    }
    std::vector<std::vector<std::size_t>> parts(shards);
    for (std::size_t c = 0; c < C; ++c) {
      auto& rows = by_class[c];
      rng.shuffle(rows);
      const auto cut = cut_even(rows, static_cast<int>(holders[c].size()));
      for (std::size_t h = 0; h < holders[c].size(); ++h)
        parts[holders[c][h]].insert(parts[holders[c][h]].end(), cut[h].begin(), cut[h].end());
    }
    // A class with fewer rows than holders leaves some empty.
    finish_shards(parts, rng);
    return parts;
  }

  Rng rng = root.fork(kDirichletStream);
  const auto shards = static_cast<std::size_t>(n);
  std::vector<std::vector<std::size_t>> parts(shards);
  std::vector<double> prop(shards);
  for (auto& rows : by_class) {
    rng.shuffle(rows);
    double total = 0;
    for (auto& v : prop) {
      v = rng.gamma(p.alpha);
      total += v;
    }
    if (!(total > 0) || !std::isfinite(total)) {
      // Tiny alpha can underflow every draw to 0; the limit of Dirichlet(alpha -> 0) puts the
      // whole class on one shard, so do that.
      std::fill(prop.begin(), prop.end(), 0.0);
      prop[rng.below(shards)] = 1.0;
      total = 1.0;
    }
    // Cumulative rounding: shard j gets [round(m * P_{j-1}), round(m * P_j)), the last one
    // ending at m, so every row lands in exactly one shard.
    const std::size_t m = rows.size();
    double cum = 0;
    std::size_t from = 0;
    for (std::size_t j = 0; j < shards; ++j) {
      cum += prop[j];
      std::size_t to = j + 1 == shards ? m
                                       : std::min(m, static_cast<std::size_t>(std::llround(
                                                         static_cast<double>(m) * cum / total)));
      to = std::max(to, from);
      parts[j].insert(parts[j].end(), rows.begin() + static_cast<std::ptrdiff_t>(from),
                      rows.begin() + static_cast<std::ptrdiff_t>(to));
      from = to;
    }
  }

  finish_shards(parts, rng);
  return parts;
}

Dataset make_shard(const Dataset& d, const ShardSpec& s, const Partition& p, std::uint64_t seed) {
  if (s.n < 1 || s.k < 1 || s.k > s.n)
    throw_data_error(d.name, "bad shard " + std::to_string(s.k) + "/" + std::to_string(s.n) +
                             ": expected K/N with 1 <= K <= N");
  const auto parts = partition_rows(d, s.n, p, seed);
  Dataset shard = d.subset(parts[static_cast<std::size_t>(s.k - 1)]);
  shard.name = d.name + " shard " + std::to_string(s.k) + "/" + std::to_string(s.n);
  return shard;
}

Dataset take_shard(Dataset&& d, const ShardSpec& s, const Partition& p, std::uint64_t seed) {
  if (s.n < 1 || s.k < 1 || s.k > s.n)
    throw_data_error(d.name, "bad shard " + std::to_string(s.k) + "/" + std::to_string(s.n) +
                             ": expected K/N with 1 <= K <= N");
  d.check_shape();
  auto parts = partition_rows(d, s.n, p, seed);
  std::vector<std::size_t> keep = std::move(parts[static_cast<std::size_t>(s.k - 1)]);
  parts.clear();
  // Rows move forward in place in ascending order (a row never overwrites one still needed);
  // the order within a shard is irrelevant because BatchOrder shuffles every epoch.
  std::sort(keep.begin(), keep.end());
  Dataset out = std::move(d);
  const std::size_t tw = out.target_dim;
  for (std::size_t i = 0; i < keep.size(); ++i) {
    const std::size_t r = keep[i];
    if (r == i) continue;
    std::copy_n(out.x.begin() + static_cast<std::ptrdiff_t>(r * out.dim), out.dim,
                out.x.begin() + static_cast<std::ptrdiff_t>(i * out.dim));
    if (out.classes > 0)
      out.labels[i] = out.labels[r];
    else
      std::copy_n(out.targets.begin() + static_cast<std::ptrdiff_t>(r * tw), tw,
                  out.targets.begin() + static_cast<std::ptrdiff_t>(i * tw));
  }
  out.rows = keep.size();
  out.x.resize(out.rows * out.dim);
  if (out.classes > 0) out.labels.resize(out.rows); else out.targets.resize(out.rows * tw);
  out.x.shrink_to_fit();
  out.labels.shrink_to_fit();
  out.targets.shrink_to_fit();
  out.name += " shard " + std::to_string(s.k) + "/" + std::to_string(s.n);
  return out;
}

}  // namespace rumor
