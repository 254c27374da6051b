// The arithmetic of mixing, on flat float buffers.
//
// Overlap rule (docs/ARCHITECTURE.md): a peer snapshots x_s when an exchange starts and keeps
// training; when the neighbour's parameters m arrive it applies x <- x + w (m - x_s), so the
// local progress made meanwhile is kept. With weights a (ours) and b (theirs), w = b / (a + b)
// on our side and a / (a + b) on theirs, so a*dx + b*dy = 0: every exchange conserves the
// weighted sum of the parameters.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

namespace rumor {

// x += w * (m - snap), accumulated in float; the three spans have the same size.
void mix_into(std::span<float> x, std::span<const float> m, std::span<const float> snap, double w);
// True if every value is finite (no NaN, no Inf).
bool all_finite(std::span<const float> v);
// ||a - b|| / max(||a||, ||b||, tiny): 0 for identical models, about 1 for unrelated ones.
double relative_distance(std::span<const float> a, std::span<const float> b);
double l2_norm(std::span<const float> v);
// mix_into(x, m, snap, w) and relative_distance(snap, m) in one pass over memory (the same
// results as the two calls); returns the distance.
double mix_into_with_distance(std::span<float> x, std::span<const float> m, std::span<const float> snap, double w);

// A model held as consecutive pieces: a snapshot sent or received as several messages (an
// exchange's chunks), or one span.
struct Pieces {
  std::vector<std::span<const float>> parts;
  Pieces() = default;
  explicit Pieces(std::span<const float> whole) : parts{whole} {}
  std::size_t size() const;
  float operator[](std::size_t i) const;  // finds the part (for tests and checks, not loops)
  // The model in one span: the single part itself, else a copy into `scratch`.
  std::span<const float> contiguous(std::vector<float>& scratch) const;
};
// mix_into_with_distance(x, m, snap, w) where m and snap are in pieces, cut anywhere: the same
// mixed values; the distance's sums are added in another order (equal to rounding).
double mix_into_with_distance(std::span<float> x, const Pieces& m, const Pieces& snap, double w);

}  // namespace rumor
