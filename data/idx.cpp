// IDX decoding from bytes (see idx.hpp). Input bytes are untrusted: every malformed input is a
// DataError naming the source and the reason, never an out-of-bounds read or an unbounded
// allocation.
#include "data/idx.hpp"

#include <limits>

namespace rumor {
namespace {

std::string hex(std::uint32_t v, int digits) {
  static const char* const kDigits = "0123456789abcdef";
  std::string s = "0x";
  for (int i = digits - 1; i >= 0; --i) s += kDigits[(v >> (4 * i)) & 0xF];
  return s;
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
      throw_data_error(source, "IDX dimensions " + dims_str(dims) + " overflow");
    n *= d;
  }
  return n;
}


}  // namespace

IdxArray parse_idx(std::span<const std::uint8_t> bytes, const std::string& source) {
  if (bytes.size() < 4)
    throw_data_error(source, "truncated: IDX header needs at least 4 bytes, file has " +
                             std::to_string(bytes.size()));
  const std::uint32_t magic = read_be32(bytes.data());
  const std::uint8_t dtype = bytes[2], rank = bytes[3];
  const IdxType* type = nullptr;
  for (const auto& t : kIdxTypes)
    if (t.code == dtype) type = &t;
  if (bytes[0] != 0 || bytes[1] != 0 || type == nullptr)
    throw_data_error(source, "bad IDX magic " + hex(magic, 8) +
                             " (expected 0x00000803 or 0x00000801: two zero bytes, dtype, rank)");
  if (dtype != 0x08)
    throw_data_error(source, "unsupported IDX dtype " + hex(dtype, 2) + " (" + type->name +
                             "); only 0x08 (unsigned byte) is supported");
  if (rank < 1 || rank > 4)
    throw_data_error(source, "bad IDX rank " + std::to_string(rank) + " (supported: 1 to 4)");

  const std::size_t header = 4 + 4 * std::size_t{rank};
  if (bytes.size() < header)
    throw_data_error(source, "truncated: IDX header of rank " + std::to_string(rank) + " needs " +
                             std::to_string(header) + " bytes, file has " +
                             std::to_string(bytes.size()));
  IdxArray a;
  a.dtype = dtype;
  for (std::size_t i = 0; i < rank; ++i) a.dims.push_back(read_be32(bytes.data() + 4 + 4 * i));
  const std::size_t want = element_count(a.dims, source);  // u8: one byte per element
  const std::size_t have = bytes.size() - header;
  if (have < want)
    throw_data_error(source, "truncated: header says " + std::to_string(want) + " bytes of data (" +
                             dims_str(a.dims) + "), file has " + std::to_string(have));
  if (have > want)
    throw_data_error(source, "trailing bytes: header says " + std::to_string(want) +
                             " bytes of data (" + dims_str(a.dims) + "), file has " +
                             std::to_string(have));
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

Dataset make_image_dataset(const IdxArray& images, const IdxArray& labels, int classes,
                           const std::string& name) {
  // IdxArray is a plain struct, so check again what parse_idx guarantees.
  auto check_array = [&](const IdxArray& a, std::size_t rank, const char* what) {
    if (a.dtype != 0x08)
      throw_data_error(name, std::string(what) + " have IDX dtype " + hex(a.dtype, 2) +
                             ", expected 0x08 (unsigned byte)");
    if (a.dims.size() != rank)
      throw_data_error(name, std::string(what) + " have rank " + std::to_string(a.dims.size()) +
                             " (" + dims_str(a.dims) + "), expected " + std::to_string(rank));
    if (a.data.size() != element_count(a.dims, name))
      throw_data_error(name, std::string(what) + " hold " + std::to_string(a.data.size()) +
                             " bytes but their dimensions " + dims_str(a.dims) + " say otherwise");
  };
  check_array(images, 3, "images");
  check_array(labels, 1, "labels");
  if (classes < 1 || classes > 256)
    throw_data_error(name, "classes must be 1 to 256 for u8 labels, got " +
                           std::to_string(classes));
  if (images.dims[0] != labels.dims[0])
    throw_data_error(name, "images have " + std::to_string(images.dims[0]) + " rows (" +
                           dims_str(images.dims) + ") but labels have " +
                           std::to_string(labels.dims[0]));

  Dataset d;
  d.name = name;
  d.rows = images.dims[0];
  d.dim = std::size_t{images.dims[1]} * images.dims[2];
  d.classes = classes;
  d.labels.resize(d.rows);
  for (std::size_t r = 0; r < d.rows; ++r) {
    if (labels.data[r] >= classes)
      throw_data_error(name, "label " + std::to_string(labels.data[r]) + " at row " +
                             std::to_string(r) + " is not below classes = " +
                             std::to_string(classes));
    d.labels[r] = labels.data[r];
  }
  d.x.resize(images.data.size());
  for (std::size_t i = 0; i < images.data.size(); ++i) d.x[i] = images.data[i] / 255.f;
  return d;
}

}  // namespace rumor
