// Reading data files (see files.hpp): IDX directories from disk, or the synthetic task.
#include "data/files.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/gzip.hpp"
#include "data/idx.hpp"
#include "data/synthetic.hpp"

namespace rumor {

namespace fs = std::filesystem;

namespace {

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw DataError(p.string() + ": cannot open for reading");
  Bytes b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw DataError(p.string() + ": read error");
  return b;
}

IdxArray load_idx(const fs::path& dir, const std::string& stem) {
  fs::path p = dir / (stem + ".gz");
  if (!fs::exists(p)) p = dir / stem;
  if (!fs::exists(p))
    throw DataError((dir / stem).string() + "[.gz]: file not found (is this a Fashion-MNIST/MNIST IDX directory?)");
  const Bytes raw = read_file(p);
  const Bytes bytes = gunzip_if_needed(raw, p.string());
  return parse_idx(bytes, p.string());
}

}  // namespace

Task load_idx_directory(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec))
    throw DataError("data directory '" + dir +
                    "' does not exist. Fashion-MNIST comes with the Debian package "
                    "dataset-fashion-mnist (apt-get install dataset-fashion-mnist puts it in "
                    "/usr/share/datasets/fashion-mnist), or run with --data synthetic");
  Task t;
  t.train = make_image_dataset(load_idx(d, "train-images-idx3-ubyte"),
                               load_idx(d, "train-labels-idx1-ubyte"), 10, "fashion-mnist/train");
  t.test = make_image_dataset(load_idx(d, "t10k-images-idx3-ubyte"),
                              load_idx(d, "t10k-labels-idx1-ubyte"), 10, "fashion-mnist/test");
  if (t.train.dim != t.test.dim)
    throw DataError(dir + ": train images are " + std::to_string(t.train.dim) + " pixels, test images " +
                    std::to_string(t.test.dim));
  return t;
}

Task load_task(const std::string& spec) {
  if (spec == "synthetic") return synthetic_task();
  return load_idx_directory(spec);
}

}  // namespace rumor
