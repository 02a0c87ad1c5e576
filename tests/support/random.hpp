// Fixed-seed random tensors for tests.
#ifndef LOOM_TESTS_SUPPORT_RANDOM_HPP
#define LOOM_TESTS_SUPPORT_RANDOM_HPP

#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

namespace loom_test {

/// `n` values uniform in [lo, hi] (integers: inclusive range), from a fixed seed.
template <class T>
std::vector<T> random_vector(std::size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::vector<T> v(n);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (auto& x : v) x = static_cast<T>(d(gen));
  } else {
    std::uniform_int_distribution<int64_t> d(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    for (auto& x : v) x = static_cast<T>(d(gen));
  }
  return v;
}

/// Largest |a - b| / (atol + rtol * |b|) over two vectors; <= 1 means "close".
template <class T>
double max_scaled_error(const std::vector<T>& a, const std::vector<T>& b, double atol,
                        double rtol) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    double s = d / (atol + rtol * std::abs(static_cast<double>(b[i])));
    if (s > worst || s != s) worst = s != s ? 1e300 : s;
  }
  return a.size() == b.size() ? worst : 1e300;
}

}  // namespace loom_test

#endif
