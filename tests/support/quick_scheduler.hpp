// Task scheduler options for tests that tune real tasks on the CPU: rounds of 8 programs, a
// small population, one generation, two re-measurements of the best two, quiet.
#pragma once

#include <loom/search/task_scheduler.hpp>

#include <string>

namespace loom_test {

inline loom::search::TaskSchedulerOptions quick_scheduler(const std::string& records, int trials) {
  loom::search::TaskSchedulerOptions o;
  o.trials = trials;
  o.tune.measures_per_round = 8;
  o.tune.records = records;
  o.tune.evolution.population = 128;
  o.tune.evolution.generations = 1;
  o.tune.rerank_top = 2;
  o.tune.rerank_measures = 2;
  o.quiet = true;
  return o;
}

}  // namespace loom_test
