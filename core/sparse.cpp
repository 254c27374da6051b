// The topk codec's pieces (sparse.hpp): k for a fraction, the choice of coordinates (half the
// largest change since last averaged, half a round-robin sweep) and the request and reply
// encodings with their checked decoders. The exchange that uses them is gossip_sparse.cpp.
#include "core/sparse.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/mix.hpp"
#include "core/serial.hpp"

namespace rumor {

std::size_t topk_k(std::size_t n, double fraction) {
  const double k = std::ceil(fraction * static_cast<double>(n));
  return std::clamp<std::size_t>(static_cast<std::size_t>(k), 1, n);
}

std::vector<std::uint32_t> select_coordinates(std::span<const float> x, std::span<const float> r, std::size_t k,
                                              std::uint64_t& cursor) {
  const std::size_t n = x.size();
  k = std::min(k, n);
  std::vector<std::uint32_t> cand;
  cand.reserve(n);
  std::vector<float> mag(n);
  for (std::size_t i = 0; i < n; ++i) {
    mag[i] = std::abs(x[i] - r[i]);
    if (mag[i] > 0) cand.push_back(static_cast<std::uint32_t>(i));
  }
  const std::size_t top = std::min(cand.size(), k / 2);
  auto larger = [&](std::uint32_t a, std::uint32_t b) { return mag[a] != mag[b] ? mag[a] > mag[b] : a < b; };
  if (top < cand.size())
    std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(top), cand.end(), larger);
  cand.resize(top);
  std::vector<char> taken(n, 0);
  for (auto i : cand) taken[i] = 1;
  // Fill the rest from the round-robin sweep.
  std::size_t scanned = 0;
  while (cand.size() < k && scanned < n) {
    const auto i = static_cast<std::uint32_t>(cursor % n);
    ++cursor;
    ++scanned;
    if (!taken[i]) {
      taken[i] = 1;
      cand.push_back(i);
    }
  }
  std::sort(cand.begin(), cand.end());
  return cand;
}

Bytes encode_sparse_request(std::span<const std::uint32_t> idx, std::span<const float> x) {
  const auto k = static_cast<std::uint32_t>(idx.size());
  Bytes b(4 + 8 * std::size_t{k});
  std::memcpy(b.data(), &k, 4);
  std::memcpy(b.data() + 4, idx.data(), 4 * std::size_t{k});
  for (std::size_t i = 0; i < k; ++i) std::memcpy(b.data() + 4 + 4 * std::size_t{k} + 4 * i, &x[idx[i]], 4);
  return b;
}

Bytes encode_sparse_reply(std::span<const std::uint32_t> idx, std::span<const float> y) {
  const auto k = static_cast<std::uint32_t>(idx.size());
  Bytes b(4 + 4 * std::size_t{k});
  std::memcpy(b.data(), &k, 4);
  for (std::size_t i = 0; i < k; ++i) std::memcpy(b.data() + 4 + 4 * i, &y[idx[i]], 4);
  return b;
}

SparseSelection decode_sparse_request(std::span<const std::uint8_t> b, std::size_t n) {
  if (b.size() < 4) throw DecodeError("sparse payload too short");
  std::uint32_t k;
  std::memcpy(&k, b.data(), 4);
  if (k > n) throw DecodeError("sparse payload selects " + std::to_string(k) + " of " + std::to_string(n) + " parameters");
  if (b.size() != 4 + 8 * std::uint64_t{k})
    throw DecodeError("sparse payload of " + std::to_string(b.size()) + " bytes does not match its count " + std::to_string(k));
  SparseSelection s;
  if (k == 0) return s;  // (memcpy into an empty vector's null data() is undefined, even for 0 bytes)
  s.indices.resize(k);
  s.values.resize(k);
  std::memcpy(s.indices.data(), b.data() + 4, 4 * std::size_t{k});
  std::memcpy(s.values.data(), b.data() + 4 + 4 * std::size_t{k}, 4 * std::size_t{k});
  std::int64_t prev = -1;
  for (auto j : s.indices) {
    if (j >= n || static_cast<std::int64_t>(j) <= prev)
      throw DecodeError("sparse payload: index " + std::to_string(j) + " out of range or not increasing");
    prev = j;
  }
  if (!all_finite(s.values)) throw DecodeError("non-finite parameters (NaN or Inf) in the payload");
  return s;
}

std::vector<float> decode_sparse_reply(std::span<const std::uint8_t> b, std::size_t k) {
  std::uint32_t kk = 0;
  if (b.size() >= 4) std::memcpy(&kk, b.data(), 4);
  if (b.size() != 4 + 4 * k || kk != k)
    throw DecodeError("sparse reply of " + std::to_string(b.size()) + " bytes, expected " + std::to_string(k) + " values");
  std::vector<float> v(k);
  if (k > 0) std::memcpy(v.data(), b.data() + 4, 4 * k);
  if (!all_finite(v)) throw DecodeError("non-finite parameters (NaN or Inf) in the payload");
  return v;
}

}  // namespace rumor
