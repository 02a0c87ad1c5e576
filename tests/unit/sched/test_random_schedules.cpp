// Property test: random legal schedules compute what the DAG computes.
//
// For each workload, random candidate steps (support/random_schedule.hpp: splits with random
// and non-dividing lengths, reorders, fuses, parallel/vectorize/unroll, compute_at at random
// levels, compute_inline, compute_root, cache_read, cache_write, rfactor, pragmas,
// storage_align) are applied to a fresh state; the candidates a state rejects with
// loom::user_error are counted and skipped. States that lower() refuses with its documented
// user_error ([loom.lower.E41x], e.g. a stage computed inside a loop its consumer is outside of)
// are counted as rejected too; schedules that hit a known bug (known_bug()) are counted and not
// run. Each resulting schedule is lowered, run by the loop-nest interpreter and compared
// with the DAG interpreter (exact on int32, float32 within the tolerance stated there), and its
// history must replay, directly and through a JSON record, to the same state. Seeds are fixed.
#include <doctest/doctest.h>
#include <loom/sched/record.hpp>

#include <sstream>
#include <string>

#include "support/random_schedule.hpp"

using namespace loom::sched;
using namespace loom_test;

namespace {

struct property_stats {
  int checked = 0;         ///< schedules lowered, run and compared
  int known_bugs = 0;      ///< legal schedules not run because of a known bug (see known_bug())
  int lower_rejected = 0;  ///< states sched/ accepted but lower() refused ([loom.lower.E41x])
  random_schedule_stats steps;
};

std::string lowered_text(const State& s) {
  std::ostringstream os;
  os << loom::lower::lower(s);
  return os.str();
}

/// Checks `count` random schedules of `w`, each of 3 to 14 candidate steps.
property_stats check_random_schedules(const workload& w, uint32_t seed, int count) {
  property_stats st;
  const reference ref = make_reference(w, seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < count; ++i) {
    State s = random_schedule(w.dag, rng, 3 + pick(rng, 12), st.steps);
    const std::string record = to_record(s.steps());
    INFO("workload ", w.name, ", schedule ", i, ": ", record);
    if (!known_bug(s).empty()) {
      ++st.known_bugs;
      continue;
    }
    auto r = run_and_compare(w, ref, s);
    if (r.rejected_by_lower) {
      ++st.lower_rejected;
      continue;
    }
    ++st.checked;
    CHECK_MESSAGE(r.ok, r.message);
    State again = replay(w.dag, from_record(record));
    CHECK(again.to_string() == s.to_string());
    // Lowering is the costly part of a check; compare the loop nests of one replay in eight.
    if (r.ok && i % 8 == 0) CHECK(lowered_text(again) == lowered_text(s));
  }
  MESSAGE(w.name << ": " << st.checked << " random schedules checked, " << st.lower_rejected
                 << " rejected by lower(), " << st.known_bugs << " skipped for known bugs; "
                 << st.steps.applied << " candidate steps applied, " << st.steps.rejected
                 << " rejected as illegal");
  return st;
}

}  // namespace

TEST_SUITE("sched") {
  TEST_CASE("random schedules of a 13x17x19 float32 matmul compute the same result") {
    auto st = check_random_schedules(matmul(13, 17, 19), 101, 500);
    CHECK(st.checked > 450);
    CHECK(st.steps.rejected > 0);
  }

  TEST_CASE("random schedules of a 13x17x19 int32 matmul match exactly") {
    auto st = check_random_schedules(matmul_i32(13, 17, 19), 102, 500);
    CHECK(st.checked > 450);
  }

  TEST_CASE("random schedules of matmul + bias + relu compute the same result") {
    auto st = check_random_schedules(matmul_bias_relu(13, 17, 19), 103, 500);
    CHECK(st.checked > 450);
  }

  TEST_CASE("random schedules of a padded strided conv2d compute the same result") {
    // 1x3x9x9 input, 4 filters of 3x3, padding 1, stride 2: a 1x4x5x5 output.
    auto st = check_random_schedules(conv2d(3, 9, 9, 4, 3, 1, 2), 104, 400);
    CHECK(st.checked > 350);
  }

  TEST_CASE("random schedules of a depthwise conv compute the same result") {
    auto st = check_random_schedules(depthwise(3, 7, 7), 105, 400);
    CHECK(st.checked > 350);
  }

  TEST_CASE("random schedules of a softmax chain compute the same result") {
    auto st = check_random_schedules(softmax(7, 13), 106, 500);
    CHECK(st.checked > 450);
  }

  TEST_CASE("random schedules of a row reduction and an int32 element-wise chain") {
    auto a = check_random_schedules(row_sum(9, 23), 107, 300);
    auto b = check_random_schedules(elementwise_chain(10, 15), 108, 300);
    CHECK(a.checked > 250);
    CHECK(b.checked > 250);
  }
}
