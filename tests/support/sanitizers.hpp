// Which sanitizer a test program is built with (LOOM_SANITIZE, cmake/LoomSanitize.cmake), for the
// few test cases that cannot run under one: `TEST_CASE("..." * doctest::skip(
// loom_test::thread_sanitizer))`, with the reason next to it.
#pragma once

namespace loom_test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool address_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool address_sanitizer = true;
#else
inline constexpr bool address_sanitizer = false;
#endif
#else
inline constexpr bool address_sanitizer = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool thread_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool thread_sanitizer = true;
#else
inline constexpr bool thread_sanitizer = false;
#endif
#else
inline constexpr bool thread_sanitizer = false;
#endif

}  // namespace loom_test
