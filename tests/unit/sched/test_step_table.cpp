// The one table of transform steps (loom/sched/steps.hpp): every step of the Step variant has a
// tag and a record layout, writes and reads back equal, hashes by every field, and is either drawn
// by the random schedules of the property tests or listed with the reason it is not. A new step
// that misses one of these fails here (the visits without a catch-all fail to compile instead).
#include <doctest/doctest.h>
#include <loom/sched/record.hpp>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/random_schedule.hpp"

using namespace loom::sched;

namespace {

// A value of each field type, and a different one.
template <class T>
T sample(bool other) {
  if constexpr (std::is_same_v<T, std::string>)
    return other ? "B" : "A";
  else if constexpr (std::is_same_v<T, int>)
    return other ? 2 : 1;
  else if constexpr (std::is_same_v<T, int64_t>)
    return other ? 12 : 7;
  else if constexpr (std::is_same_v<T, bool>)
    return other;
  else if constexpr (std::is_same_v<T, Annotation>)
    return other ? Annotation::ThreadIdxX : Annotation::Vectorized;
  else if constexpr (std::is_same_v<T, loom::ir::MemoryScope>)
    return other ? loom::ir::MemoryScope::Shared : loom::ir::MemoryScope::Local;
  else if constexpr (std::is_same_v<T, std::vector<int>>)
    return other ? std::vector<int>{1, 3} : std::vector<int>{1, 2};
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return other ? std::vector<std::string>{"a", "c"} : std::vector<std::string>{"a"};
  else if constexpr (std::is_same_v<T, std::vector<std::optional<int64_t>>>)
    return other ? std::vector<std::optional<int64_t>>{4, 2}
                 : std::vector<std::optional<int64_t>>{4, std::nullopt};
  else
    static_assert(sizeof(T) == 0, "a step field type this test has no sample of");
}

// Step S with every field at its first sample; with `changed` = k, field k at its other one.
template <class S>
S sample_step(int changed = -1) {
  S s{};
  int k = 0;
  std::apply(
      [&](const auto&... f) {
        ((s.*(f.member) = sample<std::decay_t<decltype(s.*(f.member))>>(k++ == changed)), ...);
      },
      S::fields);
  return s;
}

template <class S>
void check_step() {
  constexpr size_t n_fields = std::tuple_size_v<std::decay_t<decltype(S::fields)>>;
  CAPTURE(S::tag);
  CHECK(std::string(std::get<0>(S::fields).name) == "stage");
  const Step step = sample_step<S>();
  CHECK(std::string(step_tag(step)) == S::tag);
  const nlohmann::json j = to_json(step);
  CHECK(j.size() == n_fields + 1);
  CHECK(step_from_json(j) == step);
  CHECK(history_from_json(history_to_json({step, step})) == std::vector<Step>{step, step});
  CHECK(to_string(step).find(step_stage(step)) != std::string::npos);
  const uint64_t h = structural_hash({step});
  CHECK(structural_hash({Step{sample_step<S>()}}) == h);
  for (int k = 0; k < static_cast<int>(n_fields); ++k) {
    CAPTURE(k);
    const Step changed = sample_step<S>(k);
    CHECK_FALSE(changed == step);
    CHECK(structural_hash({changed}) != h);
    CHECK(step_from_json(to_json(changed)) == changed);
  }
}

template <size_t... I>
void check_every_step(std::index_sequence<I...>) {
  (check_step<std::variant_alternative_t<I, Step>>(), ...);
}

template <size_t... I>
std::vector<std::string> every_tag(std::index_sequence<I...>) {
  return {std::variant_alternative_t<I, Step>::tag...};
}

}  // namespace

TEST_CASE("every step writes, reads back and hashes by each of its fields") {
  check_every_step(std::make_index_sequence<std::variant_size_v<Step>>{});
}

TEST_CASE("step tags are distinct and each step is drawn by the random schedules or says why not") {
  const std::vector<std::string> tags =
      every_tag(std::make_index_sequence<std::variant_size_v<Step>>{});
  CHECK(std::set<std::string>(tags.begin(), tags.end()).size() == tags.size());
  std::multiset<std::string> listed;
  for (const auto& k : loom_test::random_step_kinds()) listed.insert(k.tag);
  for (const auto& [tag, why] : loom_test::steps_not_drawn()) {
    CHECK(!why.empty());
    listed.insert(tag);
  }
  for (const std::string& tag : tags) {
    CAPTURE(tag);
    CHECK(listed.count(tag) == 1);
  }
  CHECK(listed.size() == tags.size());
}

TEST_CASE("structural_hash depends on the order of the steps and on their count") {
  const Step a = FuseStep{"C", {0, 1}}, b = ComputeInlineStep{"pad"};
  CHECK(structural_hash({a, b}) == structural_hash({a, b}));
  CHECK(structural_hash({a, b}) != structural_hash({b, a}));
  CHECK(structural_hash({a}) != structural_hash({a, a}));
  CHECK(structural_hash({}) != structural_hash({a}));
}
