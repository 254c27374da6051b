// Tests for data/ (kept in test_core, which the sanitizer stage runs): IDX and gzip decoding on
// good bytes and on every kind of corruption, image data sets, synthetic tasks, shard partitions
// (coverage, balance, label skew, determinism), spec parsing, the batch order and batch gathering.
//
// IDX and gzip inputs are built here in memory (zlib's deflate with a gzip header), so the tests
// need no files; the one test that reads the real Fashion-MNIST skips itself when it is absent.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "data/batch_order.hpp"
#include "data/dataset.hpp"
#include "data/gzip.hpp"
#include "data/idx.hpp"
#include "data/partition.hpp"
#include "data/synthetic.hpp"

using namespace rumor;

namespace {

void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

// An IDX file: magic 00 00 dtype rank, big-endian dims, then `data`.
Bytes idx_bytes(std::uint8_t dtype, const std::vector<std::uint32_t>& dims,
                const Bytes& data) {
  Bytes b = {0, 0, dtype, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims) put_be32(b, d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes counting(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return b;
}

// gzip (not zlib) framing: deflateInit2 with 16 + MAX_WBITS.
Bytes gzip(const Bytes& in) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) ==
          Z_OK);
  Bytes out(deflateBound(&zs, static_cast<uLong>(in.size())) + 64);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The DataError message `fn` throws; fails the test if it throws nothing or something else.
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected DataError, got another exception: " << e.what());
  }
  FAIL("expected DataError, nothing was thrown");
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A classification set with `rows` rows whose labels are drawn uniformly from `classes`.
Dataset labelled(std::size_t rows, int classes, std::uint64_t seed = 5) {
  return gaussian_mixture_task(rows, 0, 2, classes, 3.0, seed).train;
}

// Checks the shards are disjoint and cover 0..rows-1 exactly once.
void check_cover(const std::vector<std::vector<std::size_t>>& parts, std::size_t rows) {
  std::vector<int> seen(rows, 0);
  for (const auto& p : parts)
    for (auto r : p) {
      REQUIRE(r < rows);
      ++seen[r];
    }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

// Mean over shards of the fraction of the shard's rows in its most common class.
double mean_max_class_fraction(const Dataset& d, const std::vector<std::vector<std::size_t>>& parts) {
  double sum = 0;
  for (const auto& p : parts) {
    std::vector<std::size_t> count(static_cast<std::size_t>(d.classes), 0);
    for (auto r : p) ++count[static_cast<std::size_t>(d.labels[r])];
    sum += static_cast<double>(*std::max_element(count.begin(), count.end())) /
           static_cast<double>(p.size());
  }
  return sum / static_cast<double>(parts.size());
}

Bytes read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

// ---- IDX and gzip ----

TEST_CASE("dataset: parse_idx reads good u8 arrays of rank 1 to 4") {
  const Bytes data = counting(2 * 3 * 4);
  const IdxArray a = parse_idx(idx_bytes(0x08, {2, 3, 4}, data), "images");
  CHECK(a.dtype == 0x08);
  CHECK(a.dims == std::vector<std::uint32_t>{2, 3, 4});
  CHECK(a.data == data);

  CHECK(parse_idx(idx_bytes(0x08, {5}, counting(5)), "labels").dims.size() == 1);
  CHECK(parse_idx(idx_bytes(0x08, {1, 2, 1, 3}, counting(6)), "r4").data == counting(6));
  // Big-endian dims: 0x00000100 = 256.
  CHECK(parse_idx(idx_bytes(0x08, {256}, counting(256)), "be").dims[0] == 256);
  // A zero dimension is a valid empty array.
  CHECK(parse_idx(idx_bytes(0x08, {0, 28, 28}, {}), "empty").data.empty());
}

TEST_CASE("dataset: gunzip_if_needed passes plain bytes and inflates gzip") {
  const Bytes raw = idx_bytes(0x08, {3, 10, 10}, counting(300));
  CHECK(gunzip_if_needed(raw, "plain") == raw);
  CHECK(gunzip_if_needed(Bytes{}, "empty").empty());

  const Bytes gz = gzip(raw);
  REQUIRE(gz.size() > 2);
  CHECK(gz[0] == 0x1f);
  CHECK(gz[1] == 0x8b);
  CHECK(gunzip_if_needed(gz, "x.gz") == raw);
  const IdxArray a = parse_idx(gunzip_if_needed(gz, "x.gz"), "x.gz");
  CHECK(a.dims == std::vector<std::uint32_t>{3, 10, 10});
  CHECK(a.data == counting(300));

  // A larger, compressible payload exercises the output growth past the first buffer.
  const Bytes big(5'000'000, 0x42);
  CHECK(gunzip_if_needed(gzip(big), "big.gz") == big);
  // Empty content and concatenated members (what `cat a.gz b.gz` makes).
  CHECK(gunzip_if_needed(gzip(Bytes{}), "nothing.gz").empty());
  Bytes two = gzip(raw);
  const Bytes second = gzip(counting(77));
  two.insert(two.end(), second.begin(), second.end());
  const Bytes c77 = counting(77);
  Bytes both = raw;
  both.insert(both.end(), c77.begin(), c77.end());
  CHECK(gunzip_if_needed(two, "two.gz") == both);
}

TEST_CASE("dataset: parse_idx rejects a bad magic") {
  const std::string e = error_of([] { parse_idx(Bytes{0, 0, 0, 1, 0, 0, 0, 0}, "f.idx"); });
  CHECK(contains(e, "f.idx: bad IDX magic 0x00000001"));
  CHECK(contains(e, "expected 0x00000803 or 0x00000801"));
  CHECK(contains(error_of([] { parse_idx(Bytes{0x12, 0x34, 8, 1, 0, 0, 0, 0}, "g"); }),
                 "bad IDX magic 0x12340801"));
  // Plain text passed in by mistake.
  const std::string text = "hello world";
  CHECK(contains(error_of([&] { parse_idx(Bytes(text.begin(), text.end()), "t"); }),
                 "bad IDX magic"));
}

TEST_CASE("dataset: parse_idx rejects dtypes other than unsigned byte") {
  const std::string e = error_of([] { parse_idx(idx_bytes(0x0D, {2}, counting(8)), "f32"); });
  CHECK(contains(e, "f32: unsupported IDX dtype 0x0d (float32)"));
  CHECK(contains(e, "only 0x08"));
  CHECK(contains(error_of([] { parse_idx(idx_bytes(0x09, {2}, counting(2)), "i8"); }),
                 "unsupported IDX dtype 0x09"));
}

TEST_CASE("dataset: parse_idx rejects a bad rank") {
  CHECK(contains(error_of([] { parse_idx(Bytes{0, 0, 8, 0}, "r0"); }), "r0: bad IDX rank 0"));
  CHECK(contains(error_of([] { parse_idx(idx_bytes(0x08, {1, 1, 1, 1, 1}, counting(1)), "r5"); }),
                 "r5: bad IDX rank 5"));
}

TEST_CASE("dataset: parse_idx rejects a truncated header") {
  CHECK(contains(error_of([] { parse_idx(Bytes{}, "none"); }), "none: truncated"));
  CHECK(contains(error_of([] { parse_idx(Bytes{0, 0, 8}, "three"); }), "three: truncated"));
  // Rank 3 needs 16 header bytes; give 12.
  const std::string e = error_of([] { parse_idx(Bytes{0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2}, "h"); });
  CHECK(contains(e, "h: truncated: IDX header of rank 3 needs 16 bytes, file has 12"));
}

TEST_CASE("dataset: parse_idx rejects truncated data and trailing bytes") {
  const std::string e =
      error_of([] { parse_idx(idx_bytes(0x08, {60000, 28, 28}, counting(1000)), "train"); });
  CHECK(contains(e, "train: truncated: header says 47040000 bytes of data"));
  CHECK(contains(e, "file has 1000"));
  const std::string t = error_of([] { parse_idx(idx_bytes(0x08, {2, 2}, counting(5)), "tr"); });
  CHECK(contains(t, "tr: trailing bytes: header says 4 bytes of data"));
  CHECK(contains(t, "file has 5"));
  // Dimensions whose product overflows size_t are rejected before any size arithmetic.
  CHECK(contains(error_of([] {
                   parse_idx(idx_bytes(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}), "huge");
                 }),
                 "huge: IDX dimensions 4294967295 x 4294967295 x 4294967295 overflow"));
}

TEST_CASE("dataset: gunzip_if_needed rejects corrupt gzip") {
  Bytes gz = gzip(idx_bytes(0x08, {4, 4}, counting(16)));
  // Corrupt the deflate data right after the 10-byte header: set the block type to the
  // reserved value 3 (BTYPE = 11).
  gz[10] = 0x07;
  const std::string e = error_of([&] { gunzip_if_needed(gz, "bad.gz"); });
  CHECK(contains(e, "bad.gz: corrupt gzip stream ("));

  // A damaged CRC in the trailer is also corrupt.
  Bytes crc = gzip(counting(100));
  crc[crc.size() - 6] ^= 0xFF;
  CHECK(contains(error_of([&] { gunzip_if_needed(crc, "crc.gz"); }), "corrupt gzip stream"));
  // Garbage after the gzip member.
  Bytes tail = gzip(counting(100));
  tail.push_back(0);
  tail.push_back(1);
  CHECK(contains(error_of([&] { gunzip_if_needed(tail, "tail.gz"); }),
                 "2 trailing bytes after the gzip stream"));
  // Every single-byte flip either throws DataError or yields bytes: never a crash.
  const Bytes base = gzip(idx_bytes(0x08, {8, 8}, counting(64)));
  for (std::size_t i = 0; i < base.size(); ++i) {
    Bytes b = base;
    b[i] ^= 0x5A;
    try {
      (void)parse_idx(gunzip_if_needed(b, "flip"), "flip");
    } catch (const DataError&) {
    }
  }
}

TEST_CASE("dataset: gunzip_if_needed rejects truncated gzip") {
  const Bytes gz = gzip(counting(100000));
  for (std::size_t cut : {gz.size() / 2, gz.size() - 1, gz.size() - 4, std::size_t{20}}) {
    const Bytes part(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(cut));
    CHECK(contains(error_of([&] { gunzip_if_needed(part, "cut.gz"); }),
                   "cut.gz: truncated gzip stream"));
  }
  CHECK(contains(error_of([] { gunzip_if_needed(Bytes{0x1f, 0x8b}, "magic.gz"); }),
                 "magic.gz: truncated gzip stream"));
}

TEST_CASE("dataset: gunzip_if_needed stops a gzip bomb at the output bound") {
  const Bytes zeros(1 << 20, 0);
  const Bytes gz = gzip(zeros);
  CHECK(gz.size() < 10000);
  CHECK(gunzip_if_needed(gz, "ok.gz", zeros.size()) == zeros);  // exactly at the bound is fine
  const std::string e = error_of([&] { gunzip_if_needed(gz, "bomb.gz", zeros.size() - 1); });
  CHECK(contains(e, "bomb.gz: gzip data inflates to more than"));
  CHECK(kMaxInflatedBytes == std::size_t{1} << 30);
}

// ---- Image data sets ----

TEST_CASE("dataset: make_image_dataset scales pixels and keeps labels") {
  const IdxArray images = parse_idx(idx_bytes(0x08, {2, 2, 3}, Bytes{0, 255, 51, 1, 2, 3, 4, 5, 6,
                                                                     7, 8, 9}),
                                    "img");
  const IdxArray labels = parse_idx(idx_bytes(0x08, {2}, Bytes{9, 0}), "lab");
  const Dataset d = make_image_dataset(images, labels, 10, "tiny/train");
  CHECK(d.name == "tiny/train");
  CHECK(d.rows == 2);
  CHECK(d.dim == 6);
  CHECK(d.classes == 10);
  CHECK(d.labels == std::vector<std::int32_t>{9, 0});
  REQUIRE(d.x.size() == 12);
  CHECK(d.x[0] == 0.f);
  CHECK(d.x[1] == 1.f);
  CHECK(d.x[2] == doctest::Approx(0.2f));
  CHECK(d.x[11] == 9 / 255.f);
  CHECK(d.targets.empty());
}

TEST_CASE("dataset: make_image_dataset rejects a row-count mismatch and bad labels") {
  const IdxArray images = parse_idx(idx_bytes(0x08, {3, 2, 2}, counting(12)), "img");
  const IdxArray two = parse_idx(idx_bytes(0x08, {2}, Bytes{1, 2}), "lab");
  const std::string e = error_of([&] { make_image_dataset(images, two, 10, "set"); });
  CHECK(contains(e, "set: images have 3 rows"));
  CHECK(contains(e, "labels have 2"));

  const IdxArray high = parse_idx(idx_bytes(0x08, {3}, Bytes{1, 10, 2}), "lab");
  const std::string l = error_of([&] { make_image_dataset(images, high, 10, "set"); });
  CHECK(contains(l, "set: label 10 at row 1 is not below classes = 10"));

  // Swapped arguments: wrong ranks.
  const IdxArray three = parse_idx(idx_bytes(0x08, {3}, Bytes{1, 2, 3}), "lab");
  CHECK(contains(error_of([&] { make_image_dataset(three, images, 10, "set"); }),
                 "images have rank 1"));
  // A hand-built IdxArray whose data disagrees with its dims.
  IdxArray lying = images;
  lying.data.pop_back();
  CHECK(contains(error_of([&] { make_image_dataset(lying, three, 10, "set"); }), "images hold 11"));
}

// ---- Synthetic tasks ----

TEST_CASE("dataset: gaussian_mixture_task is deterministic, shaped and separable") {
  const Task a = gaussian_mixture_task(2000, 500, 8, 4, 6.0, 42);
  const Task b = gaussian_mixture_task(2000, 500, 8, 4, 6.0, 42);
  const Task c = gaussian_mixture_task(2000, 500, 8, 4, 6.0, 43);
  CHECK(a.train.name == "gaussian-mixture/train");
  CHECK(a.test.name == "gaussian-mixture/test");
  CHECK(a.train.rows == 2000);
  CHECK(a.test.rows == 500);
  CHECK(a.train.dim == 8);
  CHECK(a.train.classes == 4);
  CHECK(a.train.x.size() == 2000 * 8);
  CHECK(a.test.labels.size() == 500);
  CHECK(a.train.x == b.train.x);
  CHECK(a.train.labels == b.train.labels);
  CHECK(a.test.x == b.test.x);
  CHECK(a.train.x != c.train.x);
  CHECK(a.train.x != a.test.x);

  // Class means from the training set sit at radius ~separation; a nearest-mean classifier
  // fitted on train does well on test (train and test share the generator's means).
  std::vector<double> mean(4 * 8, 0.0);
  std::vector<int> count(4, 0);
  for (std::size_t r = 0; r < a.train.rows; ++r) {
    const auto c0 = static_cast<std::size_t>(a.train.labels[r]);
    REQUIRE(c0 < 4);
    ++count[c0];
    for (std::size_t j = 0; j < 8; ++j) mean[c0 * 8 + j] += a.train.x[r * 8 + j];
  }
  for (std::size_t k = 0; k < 4; ++k) {
    CHECK(count[k] > 350);  // uniform classes: ~500 each
    double n2 = 0;
    for (std::size_t j = 0; j < 8; ++j) n2 += std::pow(mean[k * 8 + j] /= count[k], 2);
    CHECK(std::sqrt(n2) == doctest::Approx(6.0).epsilon(0.1));
  }
  int right = 0;
  for (std::size_t r = 0; r < a.test.rows; ++r) {
    std::size_t best = 0;
    double best_d = 1e300;
    for (std::size_t k = 0; k < 4; ++k) {
      double d2 = 0;
      for (std::size_t j = 0; j < 8; ++j) d2 += std::pow(a.test.x[r * 8 + j] - mean[k * 8 + j], 2);
      if (d2 < best_d) best_d = d2, best = k;
    }
    right += static_cast<int>(best) == a.test.labels[r];
  }
  CHECK(right > 450);

  CHECK(contains(error_of([] { gaussian_mixture_task(10, 10, 0, 2, 1.0, 1); }), "dim"));
  CHECK(contains(error_of([] { gaussian_mixture_task(10, 10, 2, 0, 1.0, 1); }), "classes"));
}

TEST_CASE("dataset: linear_regression_task is deterministic and affine") {
  const Task a = linear_regression_task(300, 100, 5, 3, 0.1, 7);
  const Task b = linear_regression_task(300, 100, 5, 3, 0.1, 7);
  const Task c = linear_regression_task(300, 100, 5, 3, 0.1, 8);
  CHECK(a.train.name == "linear-regression/train");
  CHECK(a.test.name == "linear-regression/test");
  CHECK(a.train.classes == 0);
  CHECK(a.train.target_dim == 3);
  CHECK(a.train.dim == 5);
  CHECK(a.train.labels.empty());
  CHECK(a.train.x.size() == 300 * 5);
  CHECK(a.train.targets.size() == 300 * 3);
  CHECK(a.test.targets.size() == 100 * 3);
  CHECK(a.train.x == b.train.x);
  CHECK(a.train.targets == b.train.targets);
  CHECK(a.test.targets == b.test.targets);
  CHECK(a.train.targets != c.train.targets);

  // Without noise, in one dimension, every (x, y) of train and test lies on one line.
  const Task line = linear_regression_task(50, 50, 1, 1, 0.0, 3);
  const float x0 = line.train.x[0], y0 = line.train.targets[0];
  const float slope = (line.train.targets[1] - y0) / (line.train.x[1] - x0);
  for (const Dataset* d : {&line.train, &line.test})
    for (std::size_t r = 0; r < d->rows; ++r)
      CHECK(d->targets[r] == doctest::Approx(y0 + slope * (d->x[r] - x0)).epsilon(1e-3));

  CHECK(contains(error_of([] { linear_regression_task(10, 10, 2, 0, 0.1, 1); }), "target_dim"));
  CHECK(contains(error_of([] { linear_regression_task(10, 10, 2, 1, -1.0, 1); }), "noise_sd"));
}

// ---- Partitions and shards ----

TEST_CASE("dataset: iid shards are disjoint, covering and within one row in size") {
  const Dataset d = labelled(1003, 10);
  for (int n : {1, 2, 7, 10, 1003}) {
    const auto parts = partition_rows(d, n, Partition{}, 11);
    REQUIRE(parts.size() == static_cast<std::size_t>(n));
    check_cover(parts, d.rows);
    std::size_t lo = SIZE_MAX, hi = 0;
    for (const auto& p : parts) lo = std::min(lo, p.size()), hi = std::max(hi, p.size());
    CHECK(hi - lo <= 1);
    CHECK(lo >= 1);
  }
}

TEST_CASE("dataset: dirichlet shards are disjoint, covering and never empty") {
  const Dataset d = labelled(2000, 10);
  for (double alpha : {100.0, 1.0, 0.1, 0.01, 1e-4}) {
    Partition p;
    p.kind = Partition::Kind::Dirichlet;
    p.alpha = alpha;
    for (int n : {1, 3, 16, 64}) {
      CAPTURE(alpha);
      CAPTURE(n);
      const auto parts = partition_rows(d, n, p, 21);
      REQUIRE(parts.size() == static_cast<std::size_t>(n));
      check_cover(parts, d.rows);
      for (const auto& part : parts) CHECK(!part.empty());
    }
  }
  // As many shards as rows: every shard gets exactly one row.
  const Dataset small = labelled(12, 3);
  const auto parts = partition_rows(small, 12, Partition::parse("dirichlet:0.05"), 2);
  check_cover(parts, 12);
  for (const auto& part : parts) CHECK(part.size() == 1);
}

TEST_CASE("dataset: label skew grows as the dirichlet alpha falls") {
  const Dataset d = labelled(5000, 10);
  const int n = 10;
  auto skew = [&](const std::string& spec) {
    double sum = 0;
    for (std::uint64_t seed = 1; seed <= 3; ++seed)
      sum += mean_max_class_fraction(d, partition_rows(d, n, Partition::parse(spec), seed));
    return sum / 3;
  };
  const double iid = skew("iid"), a10 = skew("dirichlet:10"), a01 = skew("dirichlet:0.1");
  MESSAGE("mean max-class fraction: iid " << iid << ", alpha 10 " << a10 << ", alpha 0.1 " << a01);
  CHECK(iid < a10);
  CHECK(a10 < a01);
  CHECK(iid < 0.2);  // ~0.1 plus sampling noise
  CHECK(a01 > 0.5);  // most of a shard is one class
}

TEST_CASE("dataset: labels:K shards hold exactly K classes, every class held, disjoint and covering") {
  const Dataset d = labelled(3000, 10);
  for (int k : {1, 2, 3, 5, 10}) {
    for (int n : {10, 16, 64}) {
      CAPTURE(k);
      CAPTURE(n);
      const auto parts = partition_rows(d, n, Partition::parse("labels:" + std::to_string(k)), 5);
      REQUIRE(parts.size() == static_cast<std::size_t>(n));
      check_cover(parts, d.rows);
      std::vector<int> holders(10, 0);
      for (const auto& part : parts) {
        std::vector<int> seen(10, 0);
        for (auto r : part) seen[static_cast<std::size_t>(d.labels[r])] = 1;
        int classes = 0;
        for (int c = 0; c < 10; ++c) {
          classes += seen[static_cast<std::size_t>(c)];
          holders[static_cast<std::size_t>(c)] += seen[static_cast<std::size_t>(c)];
        }
        CHECK(classes == k);
      }
      for (int h : holders) CHECK(h >= 1);
    }
  }
  CHECK(Partition::parse("labels:2").str() == "labels:2");
  CHECK_THROWS_AS(Partition::parse("labels:0"), DataError);
  CHECK_THROWS_AS(Partition::parse("labels:x"), DataError);
  // Too few slots for the classes: 3 shards of 2 labels cannot hold 10 classes.
  CHECK_THROWS_AS(partition_rows(d, 3, Partition::parse("labels:2"), 5), DataError);
}

TEST_CASE("dataset: partitions depend only on the seed") {
  const Dataset d = labelled(600, 5);
  for (const char* spec : {"iid", "dirichlet:0.5", "labels:2"}) {
    const Partition p = Partition::parse(spec);
    CAPTURE(spec);
    CHECK(partition_rows(d, 4, p, 9) == partition_rows(d, 4, p, 9));
    CHECK(partition_rows(d, 4, p, 9) != partition_rows(d, 4, p, 10));
  }
}

TEST_CASE("dataset: regression sets fall back to iid, bad shard counts are rejected") {
  const Dataset reg = linear_regression_task(101, 0, 2, 1, 0.1, 1).train;
  const auto parts = partition_rows(reg, 4, Partition::parse("dirichlet:0.1"), 3);
  check_cover(parts, reg.rows);
  for (const auto& p : parts) CHECK((p.size() == 25 || p.size() == 26));
  CHECK(parts == partition_rows(reg, 4, Partition{}, 3));

  const Dataset d = labelled(5, 2);
  CHECK(contains(error_of([&] { partition_rows(d, 0, Partition{}, 1); }), "into 0 shards"));
  CHECK(contains(error_of([&] { partition_rows(d, 6, Partition{}, 1); }), "cannot split 5 rows"));
  CHECK(contains(error_of([&] { partition_rows(Dataset{}, 1, Partition{}, 1); }), "cannot split"));
}

TEST_CASE("dataset: Partition::parse and ShardSpec::parse") {
  CHECK(Partition::parse("iid").kind == Partition::Kind::Iid);
  const Partition p = Partition::parse("dirichlet:0.3");
  CHECK(p.kind == Partition::Kind::Dirichlet);
  CHECK(p.alpha == 0.3);
  CHECK(Partition::parse("dirichlet:1e-2").alpha == 0.01);
  CHECK(Partition::parse("dirichlet:10").alpha == 10.0);
  CHECK(Partition::parse("iid").str() == "iid");
  CHECK(p.str() == "dirichlet:0.3");
  CHECK(Partition::parse(p.str()).alpha == p.alpha);
  for (const char* bad : {"", "IID", "iid ", "dirichlet", "dirichlet:", "dirichlet:0",
                          "dirichlet:-1", "dirichlet:inf", "dirichlet:nan", "dirichlet:1x",
                          "dirichlet: 1", "dirichlet:1e999", "noniid"}) {
    CAPTURE(bad);
    const std::string e = error_of([&] { Partition::parse(bad); });
    CHECK(contains(e, "bad --partition '" + std::string(bad) + "'"));
    CHECK(contains(e, "expected 'iid', 'dirichlet:ALPHA'"));
  }

  const ShardSpec s = ShardSpec::parse("3/8");
  CHECK(s.k == 3);
  CHECK(s.n == 8);
  CHECK(ShardSpec::parse("1/1").n == 1);
  CHECK(ShardSpec::parse("16/16").k == 16);
  CHECK(error_of([] { ShardSpec::parse("5/4"); }) ==
        "bad --shard '5/4': expected K/N with 1 <= K <= N");
  for (const char* bad : {"", "/", "1", "1/", "/2", "0/4", "-1/4", "1/0", "2/-3", "1/4x",
                          " 1/4", "1/4 ", "+1/4", "1.0/4", "1/2/3", "a/b", "99999999999/4"}) {
    CAPTURE(bad);
    CHECK(contains(error_of([&] { ShardSpec::parse(bad); }), "expected K/N with 1 <= K <= N"));
  }
}

TEST_CASE("dataset: make_shard takes shard k of n and names it") {
  const Dataset d = labelled(100, 4);
  const Partition p = Partition::parse("dirichlet:1");
  const auto parts = partition_rows(d, 5, p, 77);
  const Dataset s = make_shard(d, ShardSpec::parse("2/5"), p, 77);
  CHECK(s.name == "gaussian-mixture/train shard 2/5");
  CHECK(s.rows == parts[1].size());
  const Dataset expect = d.subset(parts[1]);
  CHECK(s.x == expect.x);
  CHECK(s.labels == expect.labels);
  std::size_t total = 0;
  for (int k = 1; k <= 5; ++k) total += make_shard(d, ShardSpec{k, 5}, p, 77).rows;
  CHECK(total == d.rows);
  CHECK(contains(error_of([&] { make_shard(d, ShardSpec{6, 5}, p, 77); }), "bad shard 6/5"));
}

TEST_CASE("dataset: subset copies rows in order and rejects bad indices") {
  const Dataset d = labelled(10, 3);
  const std::vector<std::size_t> idx = {7, 2, 7};
  const Dataset s = d.subset(idx);
  CHECK(s.rows == 3);
  CHECK(s.dim == d.dim);
  CHECK(s.classes == 3);
  CHECK(s.labels == std::vector<std::int32_t>{d.labels[7], d.labels[2], d.labels[7]});
  CHECK(s.x[0] == d.x[14]);
  CHECK(s.x[3] == d.x[5]);
  CHECK(s.x[5] == d.x[15]);
  CHECK(d.subset({}).rows == 0);

  const Dataset reg = linear_regression_task(6, 0, 2, 2, 0.0, 1).train;
  const Dataset rs = reg.subset(std::vector<std::size_t>{5, 0});
  CHECK(rs.target_dim == 2);
  CHECK(rs.targets == std::vector<float>{reg.targets[10], reg.targets[11], reg.targets[0],
                                         reg.targets[1]});
  const std::vector<std::size_t> out = {1, 10};
  CHECK(contains(error_of([&] { d.subset(out); }), "row index 10 out of range (10 rows)"));
}

// ---- Batches ----

TEST_CASE("dataset: BatchOrder covers every row once per epoch and reshuffles") {
  BatchOrder order(10, 4, 123);
  CHECK(order.batches_per_epoch() == 3);
  std::vector<std::vector<std::size_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    CHECK(order.epoch() == static_cast<std::size_t>(e));
    CHECK(order.position() == 0);
    std::vector<std::size_t> seen;
    std::vector<std::size_t> sizes;
    for (int b = 0; b < 3; ++b) {
      const auto batch = order.next();
      sizes.push_back(batch.size());
      seen.insert(seen.end(), batch.begin(), batch.end());
    }
    CHECK(sizes == std::vector<std::size_t>{4, 4, 2});
    epochs.push_back(seen);
    std::sort(seen.begin(), seen.end());
    std::vector<std::size_t> all(10);
    for (std::size_t i = 0; i < 10; ++i) all[i] = i;
    CHECK(seen == all);
  }
  CHECK(order.epoch() == 3);
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);

  // Batch equal to or larger than the shard: one batch per epoch.
  BatchOrder whole(5, 8, 1);
  CHECK(whole.batches_per_epoch() == 1);
  CHECK(whole.next().size() == 5);
  CHECK(whole.epoch() == 1);

  CHECK(contains(error_of([] { BatchOrder(0, 4, 1); }), "no rows"));
  CHECK(contains(error_of([] { BatchOrder(4, 0, 1); }), "batch size"));
}

TEST_CASE("dataset: BatchOrder seek reproduces the sequence from the start") {
  const std::size_t rows = 23, batch = 5;
  BatchOrder ref(rows, batch, 99);
  struct Step {
    std::size_t epoch, pos;
    std::vector<std::size_t> batch;
  };
  std::vector<Step> steps;
  for (int i = 0; i < 40; ++i) {
    Step s{ref.epoch(), ref.position(), {}};
    const auto b = ref.next();
    s.batch.assign(b.begin(), b.end());
    steps.push_back(s);
  }
  for (std::size_t i : {std::size_t{0}, std::size_t{3}, std::size_t{4}, std::size_t{17},
                        std::size_t{39}}) {
    CAPTURE(i);
    BatchOrder o(rows, batch, 99);
    o.seek(steps[i].epoch, steps[i].pos);
    CHECK(o.epoch() == steps[i].epoch);
    CHECK(o.position() == steps[i].pos);
    for (std::size_t j = i; j < steps.size(); ++j) {
      const auto b = o.next();
      CHECK(std::vector<std::size_t>(b.begin(), b.end()) == steps[j].batch);
    }
  }
  // Seeking backwards within one object also works, and another seed gives another order.
  BatchOrder o(rows, batch, 99);
  for (int i = 0; i < 13; ++i) o.next();
  o.seek(0, 0);
  const auto first = o.next();
  CHECK(std::vector<std::size_t>(first.begin(), first.end()) == steps[0].batch);
  BatchOrder other(rows, batch, 100);
  const auto ob = other.next();
  CHECK(std::vector<std::size_t>(ob.begin(), ob.end()) != steps[0].batch);
  CHECK(contains(error_of([&] { o.seek(0, rows); }), "cannot seek to position 23"));
}

TEST_CASE("dataset: gather_batch fills x and labels or targets") {
  const Dataset d = labelled(8, 3);
  std::vector<float> x = {1, 2, 3}, targets = {4};
  std::vector<std::int32_t> labels;
  const std::vector<std::size_t> idx = {6, 1};
  gather_batch(d, idx, x, labels, targets);
  CHECK(x == std::vector<float>{d.x[12], d.x[13], d.x[2], d.x[3]});
  CHECK(labels == std::vector<std::int32_t>{d.labels[6], d.labels[1]});
  CHECK(targets.empty());

  const Dataset reg = linear_regression_task(4, 0, 3, 2, 0.0, 1).train;
  gather_batch(reg, std::vector<std::size_t>{3}, x, labels, targets);
  CHECK(x == std::vector<float>{reg.x[9], reg.x[10], reg.x[11]});
  CHECK(targets == std::vector<float>{reg.targets[6], reg.targets[7]});
  CHECK(labels.empty());
  CHECK(contains(error_of([&] { gather_batch(reg, std::vector<std::size_t>{4}, x, labels, targets); }),
                 "out of range"));
}

// ---- Real data, when the machine has it ----

TEST_CASE("dataset: reads the real Fashion-MNIST files when present") {
  const std::filesystem::path dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir / "train-images-idx3-ubyte.gz")) {
    MESSAGE("skipped: " << dir << " not found");
    return;
  }
  auto load = [&](const std::string& images, const std::string& labels, const std::string& name) {
    const Bytes ib = read_file(dir / images), lb = read_file(dir / labels);
    return make_image_dataset(parse_idx(gunzip_if_needed(ib, images), images),
                              parse_idx(gunzip_if_needed(lb, labels), labels), 10, name);
  };
  const Dataset train =
      load("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "fashion-mnist/train");
  const Dataset test =
      load("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "fashion-mnist/test");
  CHECK(train.rows == 60000);
  CHECK(train.dim == 784);
  CHECK(test.rows == 10000);
  CHECK(test.dim == 784);
  std::vector<int> count(10, 0);
  for (auto l : train.labels) {
    REQUIRE((l >= 0 && l < 10));
    ++count[static_cast<std::size_t>(l)];
  }
  for (int c : count) CHECK(c == 6000);  // Fashion-MNIST is exactly balanced
  CHECK(*std::max_element(train.x.begin(), train.x.end()) <= 1.f);
  CHECK(*std::min_element(train.x.begin(), train.x.end()) >= 0.f);
}

TEST_CASE("dataset: take_shard keeps exactly make_shard's rows, in place") {
  const Task t = gaussian_mixture_task(1000, 10, 6, 4, 2.0, 9);
  for (const char* spec : {"iid", "dirichlet:0.3"}) {
    const Partition p = Partition::parse(spec);
    const ShardSpec s = ShardSpec::parse("2/3");
    const Dataset a = make_shard(t.train, s, p, 5);
    Dataset copy = t.train;
    const Dataset b = take_shard(std::move(copy), s, p, 5);
    REQUIRE(a.rows == b.rows);
    CHECK(a.name == b.name);
    // Same multiset of rows: compare sorted (row bytes, label) pairs.
    auto rows_of = [](const Dataset& d) {
      std::vector<std::pair<std::vector<float>, int>> v;
      for (std::size_t i = 0; i < d.rows; ++i)
        v.push_back({std::vector<float>(d.x.begin() + i * d.dim, d.x.begin() + (i + 1) * d.dim), d.labels[i]});
      std::sort(v.begin(), v.end());
      return v;
    };
    CHECK(rows_of(a) == rows_of(b));
  }
}
