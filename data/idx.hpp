// The IDX format (http://yann.lecun.com/exdb/mnist/ layout: Fashion-MNIST, MNIST) decoded from
// bytes already in memory and inflated (gzip.hpp), and images + labels turned into a Dataset.
// Not file reading (files.hpp) and not the other IDX element types: only u8 is decoded.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace rumor {

struct IdxArray {
  std::uint8_t dtype = 0;                 // 0x08 = unsigned byte (the only one Fashion-MNIST uses)
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;         // row-major
};
// Parses an (already inflated) IDX file. Checks magic, dtype, rank, and that the size matches
// the dimensions exactly; throws DataError naming `source` otherwise.
IdxArray parse_idx(std::span<const std::uint8_t> bytes, const std::string& source);
// Images (N x H x W, u8) and labels (N, u8) into a classification Dataset with pixels scaled
// to [0,1]; checks N matches and labels < classes.
Dataset make_image_dataset(const IdxArray& images, const IdxArray& labels, int classes,
                           const std::string& name);

}  // namespace rumor
