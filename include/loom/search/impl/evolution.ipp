// Bodies of loom/search/evolution.hpp.
#include "loom/search/evolution.hpp"

#include "loom/cost/features.hpp"
#include "loom/detail/clock.hpp"
#include "loom/detail/random.hpp"
#include "loom/lower/gpu.hpp"
#include "loom/compile_threads.hpp"
#include "loom/sched/record.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

LOOM_BEGIN_NAMESPACE
namespace search {
namespace detail {

/// SplitMix64: turns (seed, index) into well-spread generator seeds, so every candidate draws
/// from its own stream whatever thread it lands on.
inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

using ::loom::detail::seconds_since;

/// Roulette-wheel selection over max(score, 0); uniform when no score is positive.
class Roulette {
 public:
  template <class Scores>
  explicit Roulette(const Scores& scores) {
    cumulative_.reserve(scores.size());
    double total = 0;
    for (const auto& s : scores) {
      total += std::isfinite(s.score) ? std::max(s.score, 0.0) : 0.0;
      cumulative_.push_back(total);
    }
  }
  size_t draw(std::mt19937_64& rng) const {
    const size_t n = cumulative_.size();
    if (n == 0) return 0;
    const double total = cumulative_.back();
    if (!(total > 0)) return static_cast<size_t>(rng() % n);
    const double u = ::loom::detail::unit_draw(rng) * total;
    const size_t i = static_cast<size_t>(
        std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
    return std::min(i, n - 1);
  }

 private:
  std::vector<double> cumulative_;
};

}  // namespace detail

LOOM_DECL ProgramKey EvolutionarySearch::program_key(const sched::State& state) {
  return ProgramKey(state.steps());
}

LOOM_DECL EvolutionarySearch::EvolutionarySearch(Task task, SearchOptions space,
                                                 EvolutionOptions options, uint64_t seed,
                                                 std::vector<std::string> constant_inputs)
    : task_(std::move(task)),
      space_(std::move(space)),
      options_(std::move(options)),
      ctx_(task_, space_, constant_inputs),
      seed_(seed) {
  const auto probability = [](double p) { return p >= 0 && p <= 1; };
  LOOM_USER_CHECK(options_.population >= 1 && options_.generations >= 0 &&
                      options_.init_min_population >= 1 &&
                      probability(options_.mutation_probability) &&
                      probability(options_.crossover_probability) &&
                      probability(options_.sketch_transfer_probability) &&
                      probability(options_.eps_greedy) && probability(options_.init_measured_ratio),
                  "loom.search.E830")
      << "EvolutionOptions out of range: population " << options_.population
      << " (≥ 1), generations " << options_.generations << " (≥ 0), init_min_population "
      << options_.init_min_population << " (≥ 1), and mutation_probability "
      << options_.mutation_probability << ", crossover_probability "
      << options_.crossover_probability << ", sketch_transfer_probability "
      << options_.sketch_transfer_probability << ", eps_greedy " << options_.eps_greedy
      << ", init_measured_ratio " << options_.init_measured_ratio << " must lie in [0, 1]";
  if (options_.mutation_rules.empty())
    options_.mutation_rules = task_.target.is_cuda() ? gpu_mutation_rules() : cpu_mutation_rules();
  sketches_ = generate_sketches(task_, space_, {}, constant_inputs);
  LOOM_USER_CHECK(!sketches_.empty(), "loom.search.E831")
      << "the search space of workload " << task_.workload_key()
      << " has no sketch; check the SearchOptions (a custom tiling structure may match no stage)";
}

LOOM_DECL bool EvolutionarySearch::was_measured(const sched::State& state) const {
  return measured_keys_.count(program_key(state)) != 0;
}

LOOM_DECL std::vector<EvolutionarySearch::Candidate> EvolutionarySearch::sample_initial_population(
    std::mt19937_64& rng) {
  using detail::mix;
  std::vector<Candidate> out;
  std::unordered_set<ProgramKey, ProgramKey::Hash> seen;
  size_t wanted = static_cast<size_t>(options_.init_min_population);
  int barren_batches = 0;
  const int64_t batch = options_.population;
  while (out.size() < wanted) {
    const uint64_t batch_seed = rng();
    std::vector<std::optional<Candidate>> drawn(static_cast<size_t>(batch));
    ::loom::detail::parallel_chunks(static_cast<size_t>(batch), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        std::mt19937_64 r(mix(batch_seed + static_cast<uint64_t>(i)));
        const int sketch = static_cast<int>(r() % sketches_.size());
        std::optional<sched::State> s = try_sample_program(sketches_[sketch], task_, space_, r);
        if (s) drawn[i] = Candidate{std::move(*s), sketch, {}, 0};
      }
    });
    const size_t before = out.size();
    for (auto& d : drawn) {
      if (!d) continue;
      d->key = program_key(d->state);
      if (seen.insert(d->key).second) out.push_back(std::move(*d));
    }
    // Ansor halves the target after five batches in a row that add nothing: a small space
    // (a tiny workload) may not hold init_min_population distinct programs.
    if (out.size() == before) {
      if (++barren_batches >= 5) {
        wanted /= 2;
        barren_batches = 0;
        if (wanted == 0) break;
      }
    } else {
      barren_batches = 0;
    }
  }
  return out;
}

LOOM_DECL void EvolutionarySearch::score(std::vector<Candidate>& pop,
                                         const cost::CostModel& model) {
  using detail::seconds_since;
  auto start = std::chrono::steady_clock::now();
  // A program scored before in this round keeps its score; the others are lowered once each.
  // Their scores are filled in below: references into an unordered_map survive its rehashing.
  std::vector<double*> slots(pop.size());
  std::vector<const sched::State*> states;
  std::vector<double*> fresh;
  for (size_t i = 0; i < pop.size(); ++i) {
    auto [it, inserted] = round_scores_.try_emplace(pop[i].key, 0.0);
    slots[i] = &it->second;
    if (inserted) {
      states.push_back(&pop[i].state);
      fresh.push_back(&it->second);
    }
  }
  // Balanced over the threads (programs differ in cost several times over). A candidate whose
  // lowering fails gets empty features and scores −∞ (never picked).
  const std::vector<cost::ProgramFeatures> features = cost::extract_features(states, task_.target);
  stats_.features_seconds += seconds_since(start);
  start = std::chrono::steady_clock::now();
  const std::vector<double> scores = model.predict(features);
  for (size_t k = 0; k < fresh.size(); ++k) *fresh[k] = scores[k];
  stats_.predict_seconds += seconds_since(start);
  stats_.scored += static_cast<int>(pop.size());
  stats_.lowered += static_cast<int>(fresh.size());
  size_t kept = 0;
  for (size_t i = 0; i < pop.size(); ++i) {
    if (!std::isfinite(*slots[i])) continue;
    pop[i].score = *slots[i];
    if (kept != i) pop[kept] = std::move(pop[i]);
    ++kept;
  }
  pop.erase(pop.begin() + static_cast<std::ptrdiff_t>(kept), pop.end());
}

LOOM_DECL std::vector<EvolutionarySearch::Candidate> EvolutionarySearch::next_generation(
    const std::vector<Candidate>& pop, std::mt19937_64& rng) {
  using detail::mix;
  const detail::Roulette roulette(pop);
  const uint64_t gen_seed = rng();
  const int64_t n = options_.population;
  std::vector<std::optional<Candidate>> next(static_cast<size_t>(n));
  std::vector<char> changed(static_cast<size_t>(n), 0);
  ::loom::detail::parallel_chunks(static_cast<size_t>(n), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      std::mt19937_64 r(mix(gen_seed + static_cast<uint64_t>(i)));
      const Candidate& a = pop[roulette.draw(r)];
      if (::loom::detail::unit_draw(r) < options_.crossover_probability) {
        const Candidate& b = pop[roulette.draw(r)];
        if (a.sketch >= 0 && a.sketch == b.sketch && a.key != b.key) {
          if (auto child = crossover(ctx_, a.state, b.state, r)) {
            next[i].emplace(Candidate{std::move(*child), a.sketch, {}, 0});
            changed[i] = 1;
            continue;
          }
        }
      }
      // Drawn only when transfer is on, so that at 0 the random streams are those without it.
      // A program from a log has no sketch index (-1); a draw of its own sketch gives nothing.
      if (sketches_.size() > 1 && ::loom::detail::chance(r, options_.sketch_transfer_probability)) {
        int other =
            static_cast<int>(::loom::detail::draw(r, sketches_.size() - (a.sketch >= 0 ? 1 : 0)));
        if (a.sketch >= 0 && other >= a.sketch) ++other;
        if (auto child = transfer_to_sketch(ctx_, a.state, sketches_[static_cast<size_t>(other)])) {
          next[i].emplace(Candidate{std::move(*child), other, {}, 0});
          changed[i] = 1;
          continue;
        }
      }
      if (::loom::detail::unit_draw(r) < options_.mutation_probability) {
        if (auto child = mutate(ctx_, a.state, options_.mutation_rules, r)) {
          next[i].emplace(Candidate{std::move(*child), a.sketch, {}, 0});
          changed[i] = 1;
          continue;
        }
      }
      next[i].emplace(a);
    }
  });
  ::loom::detail::parallel_chunks(static_cast<size_t>(n), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      if (changed[i]) next[i]->key = program_key(next[i]->state);
  });
  std::vector<Candidate> out;
  out.reserve(next.size());
  for (auto& c : next) out.push_back(std::move(*c));
  return out;
}

LOOM_DECL std::vector<sched::State> EvolutionarySearch::next_batch(int count,
                                                                   const cost::CostModel& model) {
  using detail::mix;
  using detail::seconds_since;
  stats_ = RoundStats{};
  round_scores_.clear();  // the model may have changed since the last round
  if (count <= 0) return {};
  std::mt19937_64 rng(mix(seed_ ^ mix(++round_)));

  auto start = std::chrono::steady_clock::now();
  std::vector<Candidate> init = sample_initial_population(rng);
  stats_.sample_seconds = seconds_since(start);
  stats_.sampled = static_cast<int>(init.size());

  std::vector<Candidate> pop = init;
  const size_t from_measured =
      std::min(measured_best_.size(),
               static_cast<size_t>(options_.init_measured_ratio * options_.population));
  for (size_t i = 0; i < from_measured; ++i) pop.push_back(measured_best_[i].second);

  // The best not-yet-measured programs of all generations, by score (a min-heap of at most
  // 2 × count, as Ansor's).
  const size_t keep = 2 * static_cast<size_t>(count);
  auto worse = [](const Candidate& x, const Candidate& y) { return x.score > y.score; };
  std::vector<Candidate> best;
  std::unordered_set<ProgramKey, ProgramKey::Hash> in_best;
  for (int gen = 0;; ++gen) {
    score(pop, model);
    for (const Candidate& c : pop) {
      if (measured_keys_.count(c.key) || in_best.count(c.key)) continue;
      if (best.size() < keep) {
        best.push_back(c);
        std::push_heap(best.begin(), best.end(), worse);
        in_best.insert(c.key);
      } else if (c.score > best.front().score) {
        std::pop_heap(best.begin(), best.end(), worse);
        in_best.erase(best.back().key);
        best.back() = c;
        std::push_heap(best.begin(), best.end(), worse);
        in_best.insert(c.key);
      }
    }
    if (gen >= options_.generations || pop.empty()) break;
    start = std::chrono::steady_clock::now();
    pop = next_generation(pop, rng);
    stats_.evolve_seconds += seconds_since(start);
  }
  std::sort_heap(best.begin(), best.end(), worse);  // best first

  // ε-greedy picking: the model's best, then random members of the initial population; each
  // list stands in for the other when it runs out.
  const size_t total = static_cast<size_t>(count);
  const size_t random_share =
      static_cast<size_t>(std::floor(options_.eps_greedy * static_cast<double>(count)));
  std::vector<size_t> init_order(init.size());
  for (size_t i = 0; i < init.size(); ++i) init_order[i] = i;
  for (size_t i = init_order.size(); i > 1; --i)
    std::swap(init_order[i - 1], init_order[rng() % i]);

  std::vector<sched::State> picked;
  std::unordered_set<ProgramKey, ProgramKey::Hash> picked_keys;
  // On a GPU a program must also fit the device (threads, shared memory) and have a GPU
  // meaning (lower/gpu.hpp): mutations and crossover do not keep to that, and the CPU lowering
  // that scored them does not check it. A refused program is skipped, as measuring it would
  // only record an instantiation error.
  const bool gpu = task_.target.is_cuda();
  auto take = [&](const Candidate& c) {
    if (picked.size() >= total || measured_keys_.count(c.key) || !picked_keys.insert(c.key).second)
      return;
    if (gpu) {
      try {
        (void)lower::lower_gpu(c.state, task_.target);
      } catch (const user_error&) {
        return;
      }
    }
    picked.push_back(c.state);
    if (c.sketch >= 0) sketch_of_[c.key] = c.sketch;
  };
  size_t next_best = 0, next_random = 0;
  while (picked.size() < total - std::min(random_share, total) && next_best < best.size())
    take(best[next_best++]);
  while (picked.size() < total && next_random < init_order.size())
    take(init[init_order[next_random++]]);
  while (picked.size() < total && next_best < best.size()) take(best[next_best++]);
  return picked;
}

LOOM_DECL void EvolutionarySearch::add_measured(const std::vector<sched::State>& states,
                                                const std::vector<double>& throughputs) {
  LOOM_USER_CHECK(states.size() == throughputs.size(), "loom.search.E832")
      << "add_measured(): " << states.size() << " programs but " << throughputs.size()
      << " throughputs";
  for (size_t i = 0; i < states.size(); ++i) {
    ProgramKey key = program_key(states[i]);
    if (!measured_keys_.insert(key).second) continue;
    // Only picked programs not yet measured need their sketch remembered: the map stays small.
    int sketch = -1;
    if (auto it = sketch_of_.find(key); it != sketch_of_.end()) {
      sketch = it->second;
      sketch_of_.erase(it);
    }
    if (!(throughputs[i] > 0)) continue;
    Candidate c{states[i], sketch, std::move(key), 0};
    measured_best_.emplace_back(throughputs[i], std::move(c));
  }
  std::stable_sort(measured_best_.begin(), measured_best_.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  const size_t cap = static_cast<size_t>(options_.population);
  if (measured_best_.size() > cap)
    measured_best_.erase(measured_best_.begin() + static_cast<std::ptrdiff_t>(cap),
                         measured_best_.end());
}

LOOM_DECL std::vector<sched::State> best_predicted(const Task& task, const cost::CostModel& model,
                                                   const ModelSearchOptions& options) {
  EvolutionOptions evolution;
  evolution.population = options.population;
  evolution.generations = options.generations;
  evolution.eps_greedy = 0;  // nothing is measured: a random pick would only be a worse guess
  EvolutionarySearch search(task, options.space, evolution, options.seed, options.constant_inputs);
  return search.next_batch(options.top, model);
}

}  // namespace search
LOOM_END_NAMESPACE
