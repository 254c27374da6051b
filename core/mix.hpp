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

}  // namespace rumor
