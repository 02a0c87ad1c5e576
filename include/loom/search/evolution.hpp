/// \file
/// The evolutionary search (layer search/): Ansor's search round (ansor.md §1.1, §5), which
/// picks the next programs to measure by looking at thousands of candidates through the cost
/// model.
///
/// One round, `next_batch(count, model)`:
///  1. Initial population: programs sampled from the sketches (a sketch chosen uniformly, then
///     random annotation), in batches of `population`, until at least `init_min_population`
///     distinct programs with features exist; plus up to `init_measured_ratio × population` of
///     the best programs measured so far.
///  2. `generations` times: every member is scored by the model (features extracted from its
///     lowered loop nest; a program the round has scored before keeps its score); the best
///     not-yet-measured programs seen so far are kept (`2 × count` of them); the next population is
///     drawn by roulette selection (probability ∝ max(score, 0)) and each child is, with
///     `crossover_probability`, the crossover of two parents of one sketch (search/mutate.hpp),
///     otherwise with `sketch_transfer_probability` its parent moved onto another sketch
///     (transfer_to_sketch), otherwise with `mutation_probability` a mutation of its parent,
///     otherwise the parent itself. A last scoring pass follows the last generation.
///  3. Picking (ε-greedy): `count − ⌊eps_greedy × count⌋` programs from the kept best, highest
///     score first, then random members of the initial population; never a program measured
///     before, never twice the same. Programs are the same when their step records are.
///
/// Sampling, mutation and feature extraction run on loom's compile threads
/// (loom/compile_threads.hpp), not the kernels' runtime; every random draw comes from a generator
/// seeded per candidate from the search's seed, so a seed gives the same batches whatever the
/// thread count. The model is called from the calling thread only.
///
/// Ablations: `generations = 0` is Ansor's "no fine-tuning" (sampling ranked by the model); a
/// model that returns random scores (cost::RandomCostModel) with `generations = 0` is random
/// search.
#ifndef LOOM_SEARCH_EVOLUTION_HPP
#define LOOM_SEARCH_EVOLUTION_HPP

#include "loom/cost/model.hpp"
#include "loom/search/annotate.hpp"
#include "loom/search/mutate.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// Parameters of the evolutionary search; the defaults are Ansor's (ansor.md §5) except where
/// marked.
struct EvolutionOptions {
  /// Programs per generation (Ansor `evolutionary_search_population`).
  int population = 2048;
  /// Generations of mutation and selection per round (Ansor `evolutionary_search_num_iters`).
  int generations = 4;
  /// Probability that a selected parent is mutated rather than copied.
  double mutation_probability = 0.85;
  /// loom addition: probability that a child is the crossover of two selected parents of the
  /// same sketch (the paper's node-based crossover; TVM has none, so 0 reproduces Ansor).
  double crossover_probability = 0.05;
  /// loom addition: probability that a child is its parent moved onto another sketch of the task
  /// (transfer_to_sketch in search/mutate.hpp), drawn before mutation; 0 keeps every program in
  /// its sketch, as Ansor does. Why: mutation and crossover never leave a sketch, so tiles found
  /// in one sketch had to be found again in every other. Measured on a 2-core Zen 5 VM
  /// (benchmarks/README.md, "Sketch transfer by default"), single runs with transfer landed
  /// closer together and mostly higher: batch_matmul on 1 thread at 0.95–0.98× oneDNN
  /// over three seeds, against 0.87–0.99 without; the NCHW conv at 200 trials ahead in the
  /// tuner with each of three seeds. The odd GEMM on 1 thread was mixed (0.94–1.10 against
  /// 0.97–1.02). Not measured on a GPU.
  double sketch_transfer_probability = 0.05;
  /// Fraction of each batch picked at random from the initial population (Ansor `eps_greedy`).
  double eps_greedy = 0.05;
  /// Sampling goes on until this many distinct programs exist (Ansor
  /// `sample_init_min_population`).
  int init_min_population = 50;
  /// Best measured programs added to the initial population, as a fraction of `population`
  /// (Ansor `sample_init_use_measured_ratio`).
  double init_measured_ratio = 0.2;
  /// Mutation rules; empty means cpu_mutation_rules(), gpu_mutation_rules() for a CUDA target.
  std::vector<MutationRule> mutation_rules;
};

/// Where the time of the last round went (seconds of wall time).
struct RoundStats {
  double sample_seconds = 0;    ///< random annotation of the initial population
  double features_seconds = 0;  ///< lowering and feature extraction
  double predict_seconds = 0;   ///< the cost model
  double evolve_seconds = 0;    ///< selection, mutation, crossover
  int sampled = 0;              ///< distinct programs in the initial population
  int scored = 0;               ///< programs scored by the model, all generations
  int lowered = 0;              ///< of those, the distinct ones (each lowered once)
  double total_seconds() const {
    return sample_seconds + features_seconds + predict_seconds + evolve_seconds;
  }
};

/// A program's step history as a key: equal when every field of every step is, hashed by
/// sched::structural_hash.
struct ProgramKey {
  std::vector<sched::Step> steps;
  uint64_t hash = 0;

  ProgramKey() : ProgramKey(std::vector<sched::Step>{}) {}
  explicit ProgramKey(std::vector<sched::Step> s)
      : steps(std::move(s)), hash(sched::structural_hash(steps)) {}
  bool operator==(const ProgramKey& o) const { return hash == o.hash && steps == o.steps; }
  struct Hash {
    size_t operator()(const ProgramKey& k) const { return static_cast<size_t>(k.hash); }
  };
};

/// The search state of one task across rounds: its sketches and which programs were measured.
class EvolutionarySearch {
 public:
  /// Generates the task's sketches; `constant_inputs` names the inputs that hold constant
  /// weights (TuneOptions::constant_inputs, see SketchContext). Throws loom::user_error
  /// `[loom.search.E830]` for options out of range and `[loom.search.E831]` when the task has
  /// no sketch.
  EvolutionarySearch(Task task, SearchOptions space = {}, EvolutionOptions options = {},
                     uint64_t seed = 0, std::vector<std::string> constant_inputs = {});
  // The sketch context points at task_ and space_.
  EvolutionarySearch(const EvolutionarySearch&) = delete;
  EvolutionarySearch& operator=(const EvolutionarySearch&) = delete;

  /// Up to `count` programs never measured before, picked as in the file comment. `model` is
  /// only read (predict). Empty when the space seems exhausted. For a CUDA task only programs
  /// that lower::lower_gpu accepts are picked.
  std::vector<sched::State> next_batch(int count, const cost::CostModel& model);

  /// Tells the search that these programs were measured, with their throughputs (higher is
  /// better, any unit that stays the same across calls, 0 for a failure): they are never picked
  /// again, and the best seed the next initial population.
  void add_measured(const std::vector<sched::State>& states,
                    const std::vector<double>& throughputs);

  /// Whether a program with these steps was measured (or announced through add_measured).
  bool was_measured(const sched::State& state) const;

  const Task& task() const { return task_; }
  const std::vector<sched::State>& sketches() const { return sketches_; }
  const RoundStats& last_round() const { return stats_; }
  size_t num_measured() const { return measured_keys_.size(); }

  /// The identity of a program: its step history (Ansor dedups by printed state; comparing
  /// steps builds no string).
  static ProgramKey program_key(const sched::State& state);

 private:
  struct Candidate {
    sched::State state;
    int sketch = -1;  // index into sketches_, -1 when unknown (a measured program from a log)
    ProgramKey key;
    double score = 0;
  };

  std::vector<Candidate> sample_initial_population(std::mt19937_64& rng);
  void score(std::vector<Candidate>& pop, const cost::CostModel& model);
  std::vector<Candidate> next_generation(const std::vector<Candidate>& pop, std::mt19937_64& rng);

  Task task_;
  SearchOptions space_;
  EvolutionOptions options_;
  SketchContext ctx_;
  std::vector<sched::State> sketches_;
  uint64_t seed_;
  uint64_t round_ = 0;
  std::unordered_set<ProgramKey, ProgramKey::Hash> measured_keys_;
  std::unordered_map<ProgramKey, int, ProgramKey::Hash>
      sketch_of_;  // sketch of each picked program, until it is measured
  // Best measured programs, kept sorted by throughput (best first), for the initial population.
  std::vector<std::pair<double, Candidate>> measured_best_;
  // The score of every program this round has scored. The model does not change within a
  // round, and a fifth of the programs an evolution scores it has scored before (unchanged
  // parents, children that repeat one): lowering is most of a score.
  std::unordered_map<ProgramKey, double, ProgramKey::Hash> round_scores_;
  RoundStats stats_;
};

/// Settings of a search by the model alone (best_predicted). The defaults are one Ansor round
/// (0.1-0.7 s on the benchmark workloads, 2 cores): fewer generations found worse programs with
/// the shipped model (benchmarks/README.md, "Kernels from the cost model alone").
struct ModelSearchOptions {
  int population = 2048;  ///< EvolutionOptions::population
  int generations = 4;    ///< EvolutionOptions::generations
  int top = 8;            ///< programs returned
  uint64_t seed = 0;
  SearchOptions space;
  /// Inputs that hold constant weights (TuneOptions::constant_inputs): their layout may be
  /// rewritten.
  std::vector<std::string> constant_inputs;
};

/// The search of model-only compilation (loom::compile_from_model, cuda::compile_from_model):
/// half an Ansor round's population. The time saved builds two more of the model's picks, which
/// found faster CPU kernels than the full round with three (benchmarks/README.md, "Kernels from
/// the cost model alone").
inline ModelSearchOptions model_compile_search() {
  ModelSearchOptions o;
  o.population = 1024;
  return o;
}

/// The `options.top` distinct programs of the task's search space that `model` scores highest,
/// best first: one evolutionary round (sampling, `generations` of evolution, no ε-greedy
/// picks) and nothing measured. The same seed gives the same programs. Throws what
/// EvolutionarySearch's constructor throws.
std::vector<sched::State> best_predicted(const Task& task, const cost::CostModel& model,
                                         const ModelSearchOptions& options = {});

}  // namespace search
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/search/impl/evolution.ipp"
#endif

#endif  // LOOM_SEARCH_EVOLUTION_HPP
