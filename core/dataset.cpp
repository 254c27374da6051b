// Data sets: IDX decoding, synthetic tasks, shard partitions and the per-epoch batch order.
//
// Contract: every function here is pure. Bytes come in from the caller (files/data_files.hpp reads
// the files); randomness comes only from an Rng seeded by the arguments, so two peers given the
// same seed compute the same split of the same data without talking to each other, and a
// restarted peer can seek its batch order back to where its checkpoint left it.
//
// Input bytes are untrusted (a truncated download, a wrong file, a gzip bomb): every malformed
// input is a DataError naming the source and the reason, never an out-of-bounds read or an
// unbounded allocation. A Dataset whose vectors disagree with its own row count is a bug in
// whoever built it, so that is a RUMOR_CHECK instead.
#include "core/dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>
#include <system_error>

#include "core/check.hpp"

namespace rumor {
namespace {

// Streams forked from the partition seed, one per use, so adding a use shifts no other.
constexpr std::uint64_t kIidStream = 1;
constexpr std::uint64_t kDirichletStream = 2;
constexpr std::uint64_t kLabelsStream = 3;
// Streams forked from a synthetic task's seed.
constexpr std::uint64_t kModelStream = 0;  // class means, or W and b
constexpr std::uint64_t kTrainStream = 1;
constexpr std::uint64_t kTestStream = 2;

std::string hex(std::uint32_t v, int digits) {
  static const char* const kDigits = "0123456789abcdef";
  std::string s = "0x";
  for (int i = digits - 1; i >= 0; --i) s += kDigits[(v >> (4 * i)) & 0xF];
  return s;
}

[[noreturn]] void fail(const std::string& source, const std::string& why) {
  throw DataError(source + ": " + why);
}

void check_shape(const Dataset& d) {
  RUMOR_CHECK(d.x.size() == d.rows * d.dim, d.name + ": x does not hold rows * dim floats");
  if (d.classes > 0)
    RUMOR_CHECK(d.labels.size() == d.rows, d.name + ": labels do not hold one per row");
  else
    RUMOR_CHECK(d.targets.size() == d.rows * d.target_dim,
                d.name + ": targets do not hold rows * target_dim floats");
}

// IDX element types (the IDX spec's third magic byte) and their sizes; only u8 is decoded.
struct IdxType {
  std::uint8_t code;
  const char* name;
};
constexpr IdxType kIdxTypes[] = {{0x08, "unsigned byte"}, {0x09, "signed byte"},
                                 {0x0B, "int16"},         {0x0C, "int32"},
                                 {0x0D, "float32"},       {0x0E, "float64"}};

std::uint32_t read_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::string dims_str(const std::vector<std::uint32_t>& dims) {
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

// Product of dims, or DataError if it does not fit in size_t.
std::size_t element_count(const std::vector<std::uint32_t>& dims, const std::string& source) {
  std::size_t n = 1;
  for (auto d : dims) {
    if (d != 0 && n > std::numeric_limits<std::size_t>::max() / d)
      fail(source, "IDX dimensions " + dims_str(dims) + " overflow");
    n *= d;
  }
  return n;
}

// The last step of a label-skewed partition (Dirichlet, labels:K), whose rows were appended
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

// ---- Dataset ----

Dataset Dataset::subset(std::span<const std::size_t> idx) const {
  check_shape(*this);
  Dataset out;
  out.name = name;
  out.rows = idx.size();
  out.dim = dim;
  out.classes = classes;
  out.target_dim = target_dim;
  out.x.resize(idx.size() * dim);
  if (classes > 0)
    out.labels.resize(idx.size());
  else
    out.targets.resize(idx.size() * target_dim);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const std::size_t r = idx[i];
    if (r >= rows)
      fail(name, "row index " + std::to_string(r) + " out of range (" + std::to_string(rows) +
                     " rows)");
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(r * dim), dim,
                out.x.begin() + static_cast<std::ptrdiff_t>(i * dim));
    if (classes > 0)
      out.labels[i] = labels[r];
    else
      std::copy_n(targets.begin() + static_cast<std::ptrdiff_t>(r * target_dim), target_dim,
                  out.targets.begin() + static_cast<std::ptrdiff_t>(i * target_dim));
  }
  return out;
}

// ---- gzip ----

Bytes gunzip_if_needed(std::span<const std::uint8_t> bytes, const std::string& source) {
  return gunzip_if_needed(bytes, source, kMaxInflatedBytes);
}

Bytes gunzip_if_needed(std::span<const std::uint8_t> bytes, const std::string& source,
                       std::size_t max_inflated_bytes) {
  auto is_gzip = [](std::span<const std::uint8_t> b) {
    return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b;
  };
  if (!is_gzip(bytes)) return Bytes(bytes.begin(), bytes.end());
  // The smallest gzip member is 18 bytes (10 header, 2 empty deflate block, 8 trailer).
  if (bytes.size() < 18)
    fail(source, "truncated gzip stream (" + std::to_string(bytes.size()) + " bytes)");

  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) fail(source, "cannot initialise zlib inflate");
  // inflateEnd on every exit path, including the throws below.
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&zs};

  // Start from the size the gzip trailer claims (mod 2^32), but never believe it past what
  // deflate can reach (about 1032:1) or the bound: it is untrusted.
  const std::size_t n = bytes.size();
  const std::size_t claimed = (std::size_t{bytes[n - 1]} << 24) | (std::size_t{bytes[n - 2]} << 16) |
                              (std::size_t{bytes[n - 3]} << 8) | std::size_t{bytes[n - 4]};
  const std::size_t plausible =
      bytes.size() > std::numeric_limits<std::size_t>::max() / 1100 ? max_inflated_bytes
                                                                    : bytes.size() * 1100 + 64;
  // One byte past the bound, so that reaching it proves the output is too large.
  const std::size_t hard_cap =
      max_inflated_bytes == std::numeric_limits<std::size_t>::max() ? max_inflated_bytes
                                                                    : max_inflated_bytes + 1;
  Bytes out(std::min({std::max<std::size_t>(claimed, 4096), plausible, hard_cap}));
  std::size_t produced = 0, consumed = 0;

  for (;;) {
    // Full: grow. produced <= max_inflated_bytes here (checked below), so out < hard_cap.
    if (produced == out.size())
      out.resize(out.size() > hard_cap / 2 ? hard_cap : out.size() * 2);
    const std::size_t in_left = bytes.size() - consumed, out_left = out.size() - produced;
    // z_stream counts in uInt; feed large buffers in pieces.
    zs.next_in = const_cast<Bytef*>(bytes.data() + consumed);
    zs.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, UINT_MAX));
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out_left, UINT_MAX));
    const uInt in_given = zs.avail_in, out_given = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    consumed += in_given - zs.avail_in;
    produced += out_given - zs.avail_out;
    if (produced > max_inflated_bytes)
      fail(source, "gzip data inflates to more than " + std::to_string(max_inflated_bytes) +
                       " bytes (limit)");

    if (rc == Z_STREAM_END) {
      if (consumed == bytes.size()) break;
      // Concatenated gzip members (what `cat a.gz b.gz` makes) are one file to gzip -d.
      if (!is_gzip(bytes.subspan(consumed)))
        fail(source, std::to_string(bytes.size() - consumed) +
                         " trailing bytes after the gzip stream");
      if (inflateReset(&zs) != Z_OK) fail(source, "cannot reset zlib inflate");
      continue;
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR)
      fail(source, std::string("corrupt gzip stream (") + (zs.msg ? zs.msg : "invalid data") + ")");
    if (rc == Z_MEM_ERROR) fail(source, "out of memory inflating gzip data");
    // Z_OK or Z_BUF_ERROR: no progress possible without more input means the file ends early.
    if (consumed == bytes.size() && produced < out.size())
      fail(source, "truncated gzip stream (ends after " + std::to_string(bytes.size()) +
                       " bytes, " + std::to_string(produced) + " inflated)");
  }
  out.resize(produced);
  return out;
}

// ---- IDX ----

IdxArray parse_idx(std::span<const std::uint8_t> bytes, const std::string& source) {
  if (bytes.size() < 4)
    fail(source, "truncated: IDX header needs at least 4 bytes, file has " +
                     std::to_string(bytes.size()));
  const std::uint32_t magic = read_be32(bytes.data());
  const std::uint8_t dtype = bytes[2], rank = bytes[3];
  const IdxType* type = nullptr;
  for (const auto& t : kIdxTypes)
    if (t.code == dtype) type = &t;
  if (bytes[0] != 0 || bytes[1] != 0 || type == nullptr)
    fail(source, "bad IDX magic " + hex(magic, 8) +
                     " (expected 0x00000803 or 0x00000801: two zero bytes, dtype, rank)");
  if (dtype != 0x08)
    fail(source, "unsupported IDX dtype " + hex(dtype, 2) + " (" + type->name +
                     "); only 0x08 (unsigned byte) is supported");
  if (rank < 1 || rank > 4)
    fail(source, "bad IDX rank " + std::to_string(rank) + " (supported: 1 to 4)");

  const std::size_t header = 4 + 4 * std::size_t{rank};
  if (bytes.size() < header)
    fail(source, "truncated: IDX header of rank " + std::to_string(rank) + " needs " +
                     std::to_string(header) + " bytes, file has " + std::to_string(bytes.size()));
  IdxArray a;
  a.dtype = dtype;
  for (std::size_t i = 0; i < rank; ++i) a.dims.push_back(read_be32(bytes.data() + 4 + 4 * i));
  const std::size_t want = element_count(a.dims, source);  // u8: one byte per element
  const std::size_t have = bytes.size() - header;
  if (have < want)
    fail(source, "truncated: header says " + std::to_string(want) + " bytes of data (" +
                     dims_str(a.dims) + "), file has " + std::to_string(have));
  if (have > want)
    fail(source, "trailing bytes: header says " + std::to_string(want) + " bytes of data (" +
                     dims_str(a.dims) + "), file has " + std::to_string(have));
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

Dataset make_image_dataset(const IdxArray& images, const IdxArray& labels, int classes,
                           const std::string& name) {
  // IdxArray is a plain struct, so check again what parse_idx guarantees.
  auto check_array = [&](const IdxArray& a, std::size_t rank, const char* what) {
    if (a.dtype != 0x08)
      fail(name, std::string(what) + " have IDX dtype " + hex(a.dtype, 2) +
                     ", expected 0x08 (unsigned byte)");
    if (a.dims.size() != rank)
      fail(name, std::string(what) + " have rank " + std::to_string(a.dims.size()) + " (" +
                     dims_str(a.dims) + "), expected " + std::to_string(rank));
    if (a.data.size() != element_count(a.dims, name))
      fail(name, std::string(what) + " hold " + std::to_string(a.data.size()) +
                     " bytes but their dimensions " + dims_str(a.dims) + " say otherwise");
  };
  check_array(images, 3, "images");
  check_array(labels, 1, "labels");
  if (classes < 1 || classes > 256)
    fail(name, "classes must be 1 to 256 for u8 labels, got " + std::to_string(classes));
  if (images.dims[0] != labels.dims[0])
    fail(name, "images have " + std::to_string(images.dims[0]) + " rows (" +
                   dims_str(images.dims) + ") but labels have " + std::to_string(labels.dims[0]));

  Dataset d;
  d.name = name;
  d.rows = images.dims[0];
  d.dim = std::size_t{images.dims[1]} * images.dims[2];
  d.classes = classes;
  d.labels.resize(d.rows);
  for (std::size_t r = 0; r < d.rows; ++r) {
    if (labels.data[r] >= classes)
      fail(name, "label " + std::to_string(labels.data[r]) + " at row " + std::to_string(r) +
                     " is not below classes = " + std::to_string(classes));
    d.labels[r] = labels.data[r];
  }
  d.x.resize(images.data.size());
  for (std::size_t i = 0; i < images.data.size(); ++i) d.x[i] = images.data[i] / 255.f;
  return d;
}

// ---- Synthetic tasks ----

Task gaussian_mixture_task(std::size_t train_rows, std::size_t test_rows, std::size_t dim,
                           int classes, double separation, std::uint64_t seed) {
  const std::string source = "gaussian-mixture";
  if (dim < 1) fail(source, "dim must be at least 1");
  if (classes < 1) fail(source, "classes must be at least 1, got " + std::to_string(classes));
  if (!std::isfinite(separation) || separation < 0)
    fail(source, "separation must be a finite number >= 0");

  const Rng root(seed);
  Rng model = root.fork(kModelStream);
  std::vector<double> means(static_cast<std::size_t>(classes) * dim);
  for (int c = 0; c < classes; ++c) {
    double* m = means.data() + static_cast<std::size_t>(c) * dim;
    double norm2 = 0;
    while (norm2 < 1e-24) {  // a zero draw has no direction; redraw (practically never)
      norm2 = 0;
      for (std::size_t j = 0; j < dim; ++j) {
        m[j] = model.normal();
        norm2 += m[j] * m[j];
      }
    }
    const double scale = separation / std::sqrt(norm2);
    for (std::size_t j = 0; j < dim; ++j) m[j] *= scale;
  }

  auto draw = [&](std::size_t rows, std::uint64_t stream, const char* split) {
    Rng rng = root.fork(stream);
    Dataset d;
    d.name = source + "/" + split;
    d.rows = rows;
    d.dim = dim;
    d.classes = classes;
    d.x.resize(rows * dim);
    d.labels.resize(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      const auto c = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(classes)));
      d.labels[r] = c;
      const double* m = means.data() + static_cast<std::size_t>(c) * dim;
      for (std::size_t j = 0; j < dim; ++j)
        d.x[r * dim + j] = static_cast<float>(m[j] + rng.normal());
    }
    return d;
  };
  return Task{draw(train_rows, kTrainStream, "train"), draw(test_rows, kTestStream, "test")};
}

Task linear_regression_task(std::size_t train_rows, std::size_t test_rows, std::size_t dim,
                            std::size_t target_dim, double noise_sd, std::uint64_t seed) {
  const std::string source = "linear-regression";
  if (dim < 1) fail(source, "dim must be at least 1");
  if (target_dim < 1) fail(source, "target_dim must be at least 1");
  if (!std::isfinite(noise_sd) || noise_sd < 0)
    fail(source, "noise_sd must be a finite number >= 0");

  const Rng root(seed);
  Rng model = root.fork(kModelStream);
  // Var(W x) per output = 1 with x ~ N(0, I), so the signal does not grow with dim.
  const double w_sd = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<double> w(target_dim * dim), b(target_dim);
  for (auto& v : w) v = model.normal(0.0, w_sd);
  for (auto& v : b) v = model.normal();

  auto draw = [&](std::size_t rows, std::uint64_t stream, const char* split) {
    Rng rng = root.fork(stream);
    Dataset d;
    d.name = source + "/" + split;
    d.rows = rows;
    d.dim = dim;
    d.classes = 0;
    d.target_dim = target_dim;
    d.x.resize(rows * dim);
    d.targets.resize(rows * target_dim);
    std::vector<double> xr(dim);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t j = 0; j < dim; ++j) {
        xr[j] = rng.normal();
        d.x[r * dim + j] = static_cast<float>(xr[j]);
      }
      for (std::size_t t = 0; t < target_dim; ++t) {
        double y = b[t];
        for (std::size_t j = 0; j < dim; ++j) y += w[t * dim + j] * xr[j];
        d.targets[r * target_dim + t] = static_cast<float>(y + noise_sd * rng.normal());
      }
    }
    return d;
  };
  return Task{draw(train_rows, kTrainStream, "train"), draw(test_rows, kTestStream, "test")};
}

// ---- Partitions and shards ----

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
  check_shape(d);
  if (n < 1 || static_cast<std::size_t>(n) > d.rows)
    fail(d.name, "cannot split " + std::to_string(d.rows) + " rows into " + std::to_string(n) +
                     " shards (need 1 <= shards <= rows)");
  const Rng root(seed);

  if (p.kind == Partition::Kind::Iid || d.classes == 0) {
    std::vector<std::size_t> order(d.rows);
    std::iota(order.begin(), order.end(), std::size_t{0});
    Rng rng = root.fork(kIidStream);
    rng.shuffle(order);
    return cut_even(order, n);
  }

  if (!std::isfinite(p.alpha) || !(p.alpha > 0))
    fail(d.name, "Dirichlet alpha must be a finite number > 0, got " + std::to_string(p.alpha));
  std::vector<std::vector<std::size_t>> by_class(static_cast<std::size_t>(d.classes));
  for (std::size_t r = 0; r < d.rows; ++r) {
    const auto c = d.labels[r];
    if (c < 0 || c >= d.classes)
      fail(d.name, "label " + std::to_string(c) + " at row " + std::to_string(r) +
                       " is outside 0.." + std::to_string(d.classes - 1));
    by_class[static_cast<std::size_t>(c)].push_back(r);
  }

  if (p.kind == Partition::Kind::Labels) {
    const auto C = static_cast<std::size_t>(d.classes), shards = static_cast<std::size_t>(n);
    const std::size_t K = std::min(static_cast<std::size_t>(std::max(p.labels, 1)), C);
    if (shards * K < C)
      fail(d.name, "labels:" + std::to_string(p.labels) + " over " + std::to_string(n) + " shards holds " +
                       std::to_string(shards * K) + " class slots, fewer than the " + std::to_string(C) +
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
    fail(d.name, "bad shard " + std::to_string(s.k) + "/" + std::to_string(s.n) +
                     ": expected K/N with 1 <= K <= N");
  const auto parts = partition_rows(d, s.n, p, seed);
  Dataset shard = d.subset(parts[static_cast<std::size_t>(s.k - 1)]);
  shard.name = d.name + " shard " + std::to_string(s.k) + "/" + std::to_string(s.n);
  return shard;
}

Dataset take_shard(Dataset&& d, const ShardSpec& s, const Partition& p, std::uint64_t seed) {
  if (s.n < 1 || s.k < 1 || s.k > s.n)
    fail(d.name, "bad shard " + std::to_string(s.k) + "/" + std::to_string(s.n) +
                     ": expected K/N with 1 <= K <= N");
  check_shape(d);
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

// ---- Batches ----

BatchOrder::BatchOrder(std::size_t rows, std::size_t batch, std::uint64_t seed)
    : rows_(rows), batch_(batch), seed_(seed) {
  if (rows == 0) throw DataError("batch order: the shard has no rows");
  if (batch == 0) throw DataError("batch order: batch size must be at least 1");
  reshuffle();
}

void BatchOrder::reshuffle() {
  // Each epoch's order depends only on (seed, epoch), so seek() needs no replay.
  order_.resize(rows_);
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  Rng rng = Rng(seed_).fork(epoch_);
  rng.shuffle(order_);
}

std::span<const std::size_t> BatchOrder::next() {
  const std::size_t len = std::min(batch_, rows_ - pos_);
  current_.assign(order_.begin() + static_cast<std::ptrdiff_t>(pos_),
                  order_.begin() + static_cast<std::ptrdiff_t>(pos_ + len));
  pos_ += len;
  if (pos_ == rows_) {
    ++epoch_;
    pos_ = 0;
    reshuffle();
  }
  return current_;
}

std::size_t BatchOrder::batches_per_epoch() const { return (rows_ + batch_ - 1) / batch_; }

void BatchOrder::seek(std::size_t epoch, std::size_t pos) {
  if (pos >= rows_)
    throw DataError("batch order: cannot seek to position " + std::to_string(pos) +
                    " of an epoch of " + std::to_string(rows_) + " rows");
  epoch_ = epoch;
  pos_ = pos;
  current_.clear();
  reshuffle();
}

void gather_batch(const Dataset& d, std::span<const std::size_t> idx, std::vector<float>& x,
                  std::vector<std::int32_t>& labels, std::vector<float>& targets) {
  check_shape(d);
  x.resize(idx.size() * d.dim);
  if (d.classes > 0) {
    labels.resize(idx.size());
    targets.clear();
  } else {
    targets.resize(idx.size() * d.target_dim);
    labels.clear();
  }
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const std::size_t r = idx[i];
    if (r >= d.rows)
      fail(d.name, "batch row index " + std::to_string(r) + " out of range (" +
                       std::to_string(d.rows) + " rows)");
    std::copy_n(d.x.begin() + static_cast<std::ptrdiff_t>(r * d.dim), d.dim,
                x.begin() + static_cast<std::ptrdiff_t>(i * d.dim));
    if (d.classes > 0)
      labels[i] = d.labels[r];
    else
      std::copy_n(d.targets.begin() + static_cast<std::ptrdiff_t>(r * d.target_dim), d.target_dim,
                  targets.begin() + static_cast<std::ptrdiff_t>(i * d.target_dim));
  }
}

}  // namespace rumor
