// Synthetic tasks (see synthetic.hpp): every number comes from an Rng seeded by the arguments,
// so every peer given the same seed draws the same task without talking to the others.
#include "data/synthetic.hpp"

#include <cmath>

#include "core/rng.hpp"

namespace rumor {
namespace {

// Streams forked from a synthetic task's seed.
constexpr std::uint64_t kModelStream = 0;  // class means, or W and b
constexpr std::uint64_t kTrainStream = 1;
constexpr std::uint64_t kTestStream = 2;

// One split ("train" or "test") of a task named `source`: rows x dim features, not yet drawn.
Dataset empty_split(const std::string& source, const char* split, std::size_t rows, std::size_t dim) {
  Dataset d;
  d.name = source + "/" + split;
  d.rows = rows;
  d.dim = dim;
  d.x.resize(rows * dim);
  return d;
}

}  // namespace

Task gaussian_mixture_task(std::size_t train_rows, std::size_t test_rows, std::size_t dim,
                           int classes, double separation, std::uint64_t seed) {
  const std::string source = "gaussian-mixture";
  if (dim < 1) throw_data_error(source, "dim must be at least 1");
  if (classes < 1) throw_data_error(source, "classes must be at least 1, got " +
                                            std::to_string(classes));
  if (!std::isfinite(separation) || separation < 0)
    throw_data_error(source, "separation must be a finite number >= 0");

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
    Dataset d = empty_split(source, split, rows, dim);
    d.classes = classes;
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
  if (dim < 1) throw_data_error(source, "dim must be at least 1");
  if (target_dim < 1) throw_data_error(source, "target_dim must be at least 1");
  if (!std::isfinite(noise_sd) || noise_sd < 0)
    throw_data_error(source, "noise_sd must be a finite number >= 0");

  const Rng root(seed);
  Rng model = root.fork(kModelStream);
  // Var(W x) per output = 1 with x ~ N(0, I), so the signal does not grow with dim.
  const double w_sd = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<double> w(target_dim * dim), b(target_dim);
  for (auto& v : w) v = model.normal(0.0, w_sd);
  for (auto& v : b) v = model.normal();

  auto draw = [&](std::size_t rows, std::uint64_t stream, const char* split) {
    Rng rng = root.fork(stream);
    Dataset d = empty_split(source, split, rows, dim);
    d.classes = 0;
    d.target_dim = target_dim;
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

Task synthetic_task() { return gaussian_mixture_task(16000, 4000, 64, 10, 3.0, 20261201); }

}  // namespace rumor
