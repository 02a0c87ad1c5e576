/// \file
/// Reproducible random choices for the search: drawn from the raw std::mt19937_64 output, which
/// the standard fixes, instead of std::uniform_int_distribution and std::shuffle, which it does
/// not (a fixed seed must give the same programs with every standard library).
#ifndef LOOM_DETAIL_RANDOM_HPP
#define LOOM_DETAIL_RANDOM_HPP

#include "loom/config.hpp"

#include <cstddef>
#include <cstdint>
#include <random>

LOOM_BEGIN_NAMESPACE
namespace detail {

/// A uniform double in [0, 1) from the raw engine output (53 bits), the same on every platform.
inline double unit_draw(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

/// A uniform choice in [0, n); 0 without touching `rng` when n <= 1.
inline size_t draw(std::mt19937_64& rng, size_t n) { return n <= 1 ? 0 : rng() % n; }

/// True with probability `p` (to a millionth); false without touching `rng` when p <= 0, so
/// that an option at 0 leaves the random stream of everything else as it was.
inline bool chance(std::mt19937_64& rng, double p) {
  return p > 0 && static_cast<double>(rng() % 1000000) < p * 1e6;
}

/// A power of two in [1, cap] other than `except`, uniformly (0 when there is none). The
/// innermost tile lengths are drawn so half of the time: the innermost loop is the vectorized
/// one, and a uniform draw up to 64 would rarely give a whole number of vectors.
inline int64_t draw_power_of_two(std::mt19937_64& rng, int64_t cap, int64_t except = 0) {
  size_t count = 0;
  for (int64_t p = 1; p <= cap; p *= 2) count += p != except;
  if (count == 0) return 0;
  size_t pick = draw(rng, count);
  for (int64_t p = 1;; p *= 2)
    if (p != except && pick-- == 0) return p;
}

/// A free tile length in [1, cap] other than `except` (0: none), uniformly; for the innermost
/// length, half of the time a power of two instead (draw_power_of_two). 0 when there is none.
inline int64_t draw_free_length(std::mt19937_64& rng, int64_t cap, bool innermost,
                                int64_t except = 0) {
  if (innermost && rng() % 2 == 0)
    if (const int64_t p = draw_power_of_two(rng, cap, except)) return p;
  const bool skip = except >= 1 && except <= cap;
  const int64_t choices = cap - (skip ? 1 : 0);
  if (choices < 1) return 0;
  int64_t v = 1 + static_cast<int64_t>(draw(rng, static_cast<size_t>(choices)));
  if (skip && v >= except) ++v;
  return v;
}

}  // namespace detail
LOOM_END_NAMESPACE

#endif  // LOOM_DETAIL_RANDOM_HPP
