// Dataset's own operations (subset, gather_batch, the shape check) and the DataError every data/
// file throws through (see dataset.hpp).
//
// Contract of all of data/ (files.cpp aside): every function is pure. Bytes come in from the
// caller (files.hpp reads the files); randomness comes only from an Rng seeded by the arguments,
// so two peers given the same seed compute the same split of the same data without talking to
// each other, and a restarted peer can seek its batch order back to where its checkpoint left
// it. Input bytes are untrusted: every malformed input is a DataError naming the source and the
// reason. A Dataset whose vectors disagree with its own row count is a bug in whoever built it,
// so that is a RUMOR_CHECK instead.
#include "data/dataset.hpp"

#include <algorithm>

#include "core/check.hpp"

namespace rumor {

void throw_data_error(const std::string& source, const std::string& why) {
  throw DataError(source + ": " + why);
}

void Dataset::check_shape() const {
  RUMOR_CHECK(x.size() == rows * dim, name + ": x does not hold rows * dim floats");
  if (classes > 0)
    RUMOR_CHECK(labels.size() == rows, name + ": labels do not hold one per row");
  else
    RUMOR_CHECK(targets.size() == rows * target_dim,
                name + ": targets do not hold rows * target_dim floats");
}

Dataset Dataset::subset(std::span<const std::size_t> idx) const {
  check_shape();
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
      throw_data_error(name, "row index " + std::to_string(r) + " out of range (" +
                             std::to_string(rows) + " rows)");
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

void gather_batch(const Dataset& d, std::span<const std::size_t> idx, std::vector<float>& x,
                  std::vector<std::int32_t>& labels, std::vector<float>& targets) {
  d.check_shape();
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
      throw_data_error(d.name, "batch row index " + std::to_string(r) + " out of range (" +
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
