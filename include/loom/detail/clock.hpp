/// \file
/// Wall-clock helpers for loom's own work (tuning, measuring, compiling): elapsed seconds on the
/// steady clock and their printed forms.
#ifndef LOOM_DETAIL_CLOCK_HPP
#define LOOM_DETAIL_CLOCK_HPP

#include "loom/config.hpp"

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <string>

LOOM_BEGIN_NAMESPACE
namespace detail {

/// Seconds from `start` to now on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// "1.5" rather than std::to_string's "1.500000": 4 significant digits, no unit (messages that
/// say "s" themselves).
inline std::string format_seconds(double s) {
  std::ostringstream os;
  os << std::setprecision(4) << s;
  return os.str();
}

/// A duration for progress lines: "42.0 s" below two minutes, else "3.5 min".
inline std::string format_duration(double s) {
  char buf[32];
  if (s < 120)
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  return buf;
}

}  // namespace detail
LOOM_END_NAMESPACE

#endif  // LOOM_DETAIL_CLOCK_HPP
