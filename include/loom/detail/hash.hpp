/// \file
/// A stable 64-bit hash: the same value on every run and machine (unlike std::hash), so that it
/// can key tuning records.
#ifndef LOOM_DETAIL_HASH_HPP
#define LOOM_DETAIL_HASH_HPP

#include "loom/config.hpp"

#include <cstdint>
#include <cstring>
#include <string_view>

LOOM_BEGIN_NAMESPACE
namespace detail {

/// splitmix64 finaliser: a bijective mix with good avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Order-dependent combination of a running hash with one more value.
constexpr uint64_t hash_combine(uint64_t seed, uint64_t value) {
  return mix64(seed ^ (value + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2)));
}

inline uint64_t hash_double(double v) {
  if (v == 0.0) v = 0.0;  // +0 and -0 compare equal, so they must hash equal
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return mix64(bits);
}

constexpr uint64_t hash_string(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then mixed
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return mix64(h);
}

}  // namespace detail
LOOM_END_NAMESPACE

#endif  // LOOM_DETAIL_HASH_HPP
