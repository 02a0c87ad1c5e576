/// \file
/// Evolutionary operators (layer search/): Ansor's mutation rules and the node-based crossover
/// of the paper (§5.1; TVM never shipped it), used by the evolutionary search
/// (search/evolution.hpp) on complete programs sampled from sketches (search/annotate.hpp).
///
/// Every operator takes a complete program and returns a new complete program, or nothing when
/// it does not apply (no split to mutate, no other compute location) or the edit is illegal when
/// replayed. Results are always rebuilt by replaying an edited history on the DAG, so a returned
/// state is exactly what its steps describe (the steps are what tuning records store).
///
/// CPU rules and Ansor's weights (ansor.md §5):
///
/// | rule                  | weight | edit                                                    |
/// |-----------------------|--------|---------------------------------------------------------|
/// | MutateTileSize        | 0.90   | move a divisor of one level's length to another level   |
/// | MutateAutoUnroll      | 0.04   | redraw one `auto_unroll_max_step`                       |
/// | MutateComputeLocation | 0.05   | move a compute_at stage to another candidate loop       |
/// | MutateParallel        | 0.01   | change how many outer loops are fused and parallelized  |
///
/// loom adds one opt-in rule, MutateRegisterTile (register_tile_mutation_rule(), weight 0.10):
/// add it to EvolutionOptions::mutation_rules next to cpu_mutation_rules() to use it. GPU
/// targets use gpu_mutation_rules(): the CPU rules and MutateDoubleBuffer (weight 0.02), which
/// switches one loop's pipelining (annotate.hpp, DoubleBuffer) on, off, or to another number of
/// stages.
///
/// Which steps random annotation made. A complete program's history is its sketch's steps (split
/// lengths filled), then ChangeComputeLocation's compute_at steps, then the Parallel, Unroll and
/// Vectorization steps (annotate.hpp). The program records where each part begins
/// (sched::State::origins(), set by try_sample_program from the init rules' parts and kept by
/// every operator here; tuning records carry them). MutateComputeLocation edits only the
/// location part and crossover compares the parents up to it. A program that does not record
/// them (a record of a log written before records did, a schedule built by hand) gets them from
/// inferred_origins().
///
/// Randomness: only `rng()` is used, reduced modulo the number of choices (as in annotate.hpp).
/// The operators keep no state: threads may call them at once, each with its own engine.
#ifndef LOOM_SEARCH_MUTATE_HPP
#define LOOM_SEARCH_MUTATE_HPP

#include "loom/search/annotate.hpp"

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// One mutation rule: a random edit of a complete program, chosen with probability proportional
/// to `weight`. `apply` returns the edited program, rebuilt by replaying its history, or nothing
/// when the rule does not apply; a loom::user_error it throws counts as not applying. It must
/// use only `rng()` for randomness to stay reproducible across platforms.
struct MutationRule {
  using ApplyFn = std::function<std::optional<sched::State>(const SketchContext&,
                                                            const sched::State&, std::mt19937_64&)>;
  std::string name;
  double weight = 0;
  ApplyFn apply;
};

/// The CPU rules of the table above, with Ansor's weights.
const std::vector<MutationRule>& cpu_mutation_rules();
/// cpu_mutation_rules() and MutateDoubleBuffer (below) with weight 0.02.
const std::vector<MutationRule>& gpu_mutation_rules();
/// MutateRegisterTile (below) as a rule of weight 0.10; not among cpu_mutation_rules().
MutationRule register_tile_mutation_rule();

/// MutateTileSize (TVM's): picks a split step with all lengths set, extent > 1 and innermost
/// length at most `max_innermost_split_factor`. Its levels are the lengths plus the implicit
/// outermost one (extent / product). In a random order of the levels, the first level with a
/// length > 1 gives a random divisor (> 1) of its length to the next level in that order that
/// can take one (the innermost level only as much as keeps it within
/// `max_innermost_split_factor`; TVM tries only the next level, then the next source). Levels
/// whose loops are fused into one loop (the outer tiles under a parallel fuse) do not trade, as
/// that leaves the loop nest as it was. The product of the levels stays the extent. Splits that
/// follow it (follow_split, follow_fused_split) read its lengths when replayed, so they follow.
/// A non-divisible split (allow_non_divisible_tiles) instead redraws one of its lengths (a
/// random level that has another value to take) uniformly among the other values in the range
/// FillTileSize draws free lengths from: 1 .. what the inner lengths leave of the extent (ceil
/// division), and at most `max_innermost_split_factor` for the innermost one. All split steps
/// are candidates, including lengths a sketch fixed (define_split, the memory-bound-reduction
/// rule's vector width).
std::optional<sched::State> mutate_tile_size(const SketchContext& ctx, const sched::State& state,
                                             std::mt19937_64& rng);
/// MutateRegisterTile (loom's addition): reshapes a stage's register tile without changing its
/// size. It picks a stage with at least two perfect splits of spatial loops (all lengths set,
/// innermost length at most `max_innermost_split_factor`), and of two of them, A and B, a divisor
/// f > 1 of A's innermost length that B has in one of its other levels (the implicit outermost
/// one included) and that keeps B's innermost length within `max_innermost_split_factor`. A's
/// innermost length gives f to a random other level of A and B's innermost takes f from a level
/// of B that has it; pairs and factors are tried in random order. The product of the innermost
/// lengths (the accumulators of the tile) and each split's product stay the same.
///
/// Why it exists, and why it is not a default: with MutateTileSize alone, an 8-by-1 register
/// tile (8 accumulators) reaches 4 by 2 only through 4 by 1 or 8 by 2, both slower on a CPU with
/// 16 vector registers. One tuning log of the conv layer of issue 6 stayed on 8 by 1 for 892
/// trials (489 of them had that tile), and a 4-by-2 tile was 1.3x faster. But fresh 600- and
/// 1,000-trial runs with two seeds reached 4-by-2 tiles with Ansor's rules alone, and their best
/// programs ran as fast as those of runs with this rule (interleaved, within 5 %). So it stays
/// opt-in until a measurement shows it helps.
std::optional<sched::State> mutate_register_tile(const SketchContext& ctx,
                                                 const sched::State& state, std::mt19937_64& rng);
/// MutateDoubleBuffer: on sm_80 and later, one of the loops that are pipelined or could be
/// (double_buffer_candidates) switches, uniformly: a pipelined loop is annotated back to serial
/// or to another number of stages (up to `gpu_max_pipeline_stages`, uniformly among those
/// choices) by steps appended to the history; another gets a pipeline annotation of 2 to
/// `gpu_max_pipeline_stages` stages. Nothing when there is no such loop or the target has no
/// cp.async.
std::optional<sched::State> mutate_double_buffer(const SketchContext& ctx,
                                                 const sched::State& state, std::mt19937_64& rng);
/// MutateAutoUnroll: sets one `auto_unroll_max_step` pragma step, chosen uniformly, to another of
/// the options' candidates (uniformly among the values other than its own).
std::optional<sched::State> mutate_auto_unroll(const SketchContext& ctx, const sched::State& state,
                                               std::mt19937_64& rng);
/// MutateComputeLocation: one of ChangeComputeLocation's steps (see the file comment), chosen
/// uniformly, becomes, uniformly among the choices other than itself, a compute_at at one of the
/// compute_location_candidates() of the state before that step, or compute_root. The stages
/// computed inside the moved one move with it. A choice that leaves the loop nest as it was
/// (a loop that Parallel later fused with the current one) is passed over for another (each
/// try is a replay from the state before the step). Not applicable with
/// `disable_change_compute_location`; gives up when the stage would go inside another stage
/// while it has a parallel loop (nested parallel regions).
std::optional<sched::State> mutate_compute_location(const SketchContext& ctx,
                                                    const sched::State& state,
                                                    std::mt19937_64& rng);
/// MutateParallel: a parallel annotation of a stage's outermost loop, chosen uniformly, gets
/// another number of fused outer loops (uniformly among 1 .. the most annotate_parallel could
/// fuse in the state before it: outer spatial unannotated loops, up to and including the first
/// loop where another stage is computed). The fuse step is rewritten, added or removed (a single
/// loop needs none) and the later steps of the stage are renumbered; gives up when one cannot be
/// (it refers to a loop now inside the fused one, reorders the stage, or a later step adds
/// stages).
std::optional<sched::State> mutate_parallel(const SketchContext& ctx, const sched::State& state,
                                            std::mt19937_64& rng);

/// One mutation: a rule drawn with probability proportional to its weight (rules with weight
/// <= 0 never), and another draw, up to `attempts` draws in all, while the drawn rule does not
/// apply. Nothing when no draw applied.
std::optional<sched::State> mutate(const SketchContext& ctx, const sched::State& state,
                                   const std::vector<MutationRule>& rules, std::mt19937_64& rng,
                                   int attempts = 8);

/// Where the parts of a history begin, inferred from its steps, for a program that does not
/// record them. The annotation part starts at the first annotate or pragma step (with the fuse
/// right before it, if that fuse is of the same stage); sketches written by the built-in rules
/// have neither. ChangeComputeLocation's steps are the longest run of compute_at (or
/// compute_root) steps right before it, in decreasing stage order, of stages that are neither
/// tiled nor multi-level tiled and that the sketch did not place. A stage counts as placed by its
/// sketch when an earlier step placed it, placed another stage inside it, or made it by
/// cache_read: the built-in rules place the stages they compute inside another stage together
/// with it (memory-bound reduction), and every cache_read copy. A sketch that ends by placing
/// stages where ChangeComputeLocation could have put them gives the same history as the sketch
/// without those steps; they then count as ChangeComputeLocation's (the recorded origins know
/// better).
sched::StepOrigins inferred_origins(const SketchContext& ctx, const sched::State& state);

/// Node-based crossover (paper §5.1): a child on the loop structure of `a` whose stages each take
/// their genes from `a` or `b`, recording a's origins. The parents must come from the same
/// sketch: their histories up to the location part (see the file comment) must be the same steps
/// apart from split lengths and pragma values; otherwise nothing is returned. Then, per stage (one
/// fair draw each, stages in the order they first appear in a's history, then b's):
///  - the child's history is a's, so every step's kind, stage and loop positions are a's;
///  - a stage whose random-annotation steps (compute location, parallel and vectorize fuses and
///    annotations) differ between the parents takes everything from `a`: that structure was
///    chosen for a's tile sizes;
///  - another stage drawn for `b` takes b's lengths for each of its split steps and b's value for
///    each of its pragma steps (`auto_unroll_max_step`); follow splits follow whichever parent
///    their source split's stage took.
/// Returns nothing as well when the child does not replay.
std::optional<sched::State> crossover(const SketchContext& ctx, const sched::State& a,
                                      const sched::State& b, std::mt19937_64& rng);

/// Sketch transfer (loom's addition): `program`'s tile sizes and annotation moved onto another
/// sketch of its task, so the search can compare two loop structures (with and without a cache
/// stage, say) at the same tiles. Evolution otherwise never leaves a program's sketch: mutation
/// and crossover keep it, and a good tiling found in one sketch must be found again from scratch
/// in another.
///
/// Each split step of `sketch` takes the lengths of the split of the program's sketch part with
/// the same stage, loop, extent and number of levels (the k-th such split the k-th); then the
/// program's random-annotation steps (compute locations, parallel, unroll, vectorize) are
/// replayed in order, and a stage whose step does not apply (a stage `sketch` lacks, a loop it
/// has elsewhere) keeps the steps it got before that one. Nothing when a split of `sketch` has no
/// counterpart, when `sketch` is the program's own sketch (its steps are the program's sketch
/// part apart from lengths), or when the splits do not replay. No randomness.
std::optional<sched::State> transfer_to_sketch(const SketchContext& ctx,
                                               const sched::State& program,
                                               const sched::State& sketch);

}  // namespace search
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/search/impl/mutate.ipp"
#endif

#endif  // LOOM_SEARCH_MUTATE_HPP
