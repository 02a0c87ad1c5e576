// loom's own threads (loom/compile_threads.hpp): every index once, exceptions carried to the
// caller, nested regions serial, and the setting's bounds.
#include <doctest/doctest.h>

#include <loom/compile_threads.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace loom;

TEST_SUITE("search") {
  TEST_CASE("parallel_chunks covers [0, n) once, in chunks as documented, on several threads") {
    for (const int threads : {1, 2, 5}) {
      for (const size_t n : {size_t{1}, size_t{7}, size_t{1000}}) {
        for (const size_t chunks : {size_t{1}, size_t{3}, size_t{64}}) {
          std::vector<std::atomic<int>> hits(n);
          std::mutex m;
          std::set<std::pair<size_t, size_t>> seen;
          std::set<std::thread::id> ids;
          detail::parallel_chunks(
              n, chunks,
              [&](size_t begin, size_t end) {
                for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
                std::lock_guard<std::mutex> lock(m);
                seen.emplace(begin, end);
                ids.insert(std::this_thread::get_id());
              },
              threads);
          for (size_t i = 0; i < n; ++i) CHECK(hits[i].load() == 1);
          const size_t c = std::min(chunks, n);
          CHECK(seen.size() == c);
          for (size_t k = 0; k < c; ++k) CHECK(seen.count({n * k / c, n * (k + 1) / c}) == 1);
          CHECK(ids.size() <= static_cast<size_t>(threads));
        }
      }
    }
  }

  TEST_CASE(
      "a chunk's exception reaches the caller after every chunk ran; nested regions run "
      "serially") {
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH_AS(detail::parallel_chunks(
                             8, 8,
                             [&](size_t begin, size_t) {
                               ran.fetch_add(1);
                               if (begin == 3) throw std::runtime_error("chunk 3");
                             },
                             4),
                         "chunk 3", std::runtime_error);
    CHECK(ran.load() == 8);

    std::mutex m;
    std::set<std::thread::id> inner_ids;
    detail::parallel_chunks(
        4, 4,
        [&](size_t, size_t) {
          const auto outer = std::this_thread::get_id();
          detail::parallel_chunks(
              16, 16,
              [&](size_t, size_t) {
                std::lock_guard<std::mutex> lock(m);
                CHECK(std::this_thread::get_id() == outer);
                inner_ids.insert(outer);
              },
              4);
        },
        2);
    CHECK(!inner_ids.empty());
  }

  TEST_CASE("set_compile_threads sets loom's own thread count; 0 restores the default") {
    const int def = default_compile_threads();
    CHECK(def >= 1);
    set_compile_threads(3);
    CHECK(compile_threads() == 3);
    set_compile_threads(0);
    CHECK(compile_threads() == def);
    CHECK_THROWS_WITH_AS(set_compile_threads(-2), doctest::Contains("[loom.core.E010]"),
                         user_error);
    CHECK(compile_threads() == def);
  }
}
