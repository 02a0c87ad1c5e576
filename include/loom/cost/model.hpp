/// \file
/// The cost-model interface the tuner uses (layer cost/), three models behind it, and the
/// ranking metrics used to judge them.
///
/// A cost model scores programs from their features only; how the features are extracted is
/// not its business. A program's features are a matrix with one row per written buffer
/// (`ProgramFeatures`, cost/program_features.hpp), as in Ansor (ansor.md §3); cost/features.hpp
/// extracts them and names the columns. The protocol is batched and follows TVM's `CostModel`:
///  - `update(programs, throughputs)` after every measured batch, with each program's normalized
///    throughput `task's best cost / program's cost` in [0, 1] (0 for a failed measurement);
///  - `predict(programs)` gives one score per program, higher is better. Scores rank candidates;
///    only the learned model's scores approximate throughputs.
///
/// The models:
///  - `GbdtCostModel`: Ansor's learned model. Every update retrains a Gbdt (cost/gbdt.hpp) from
///    scratch on all samples seen so far, with the pack-sum objective weighted by throughput;
///    until `warmup_samples` samples exist it returns uniform random scores.
///  - `RandomCostModel`: seeded uniform scores (Ansor's RandomModel).
///  - `AnalyticCostModel`: a fixed formula over a few named feature columns, e.g. a roofline of
///    FLOPs against memory traffic; no training.
///
/// A program without rows (its features could not be extracted) scores −∞ under the learned and
/// analytic models, as in Ansor, and is never learned from. Models are not thread-safe: predict()
/// of the random and warming-up models draws from the model's generator.
///
/// Errors are loom::user_error with ids `loom.cost.E957` and `loom.cost.E964` – `loom.cost.E969`.
#ifndef LOOM_COST_MODEL_HPP
#define LOOM_COST_MODEL_HPP

#include "loom/cost/gbdt.hpp"
#include "loom/cost/program_features.hpp"

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <random>
#include <span>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cost {

/// What the tuner asks of a cost model. Implementations throw `[loom.cost.E965]` for a
/// `ProgramFeatures` whose `values` do not hold `num_rows × num_features` floats and
/// `[loom.cost.E966]` for throughputs that do not match the programs.
class CostModel {
 public:
  virtual ~CostModel() = default;

  /// Learns from measured programs: `throughputs[i]` is program i's normalized throughput,
  /// finite and ≥ 0 (0 for a failed measurement).
  virtual void update(const std::vector<ProgramFeatures>& programs,
                      const std::vector<double>& throughputs) = 0;
  /// One score per program; higher means faster.
  virtual std::vector<double> predict(const std::vector<ProgramFeatures>& programs) const = 0;
  /// Writes the model's state (see each model for what that is).
  virtual void save(std::ostream& out) const = 0;
  /// Reads what save() wrote; throws `[loom.cost.E968]` for a file of another model kind or
  /// format version.
  virtual void load(std::istream& in) = 0;
  /// A short name for logs: "gbdt", "random", or the analytic model's name.
  virtual std::string name() const = 0;
};

/// Settings of GbdtCostModel.
struct GbdtCostModelOptions {
  /// The learner's parameters; the defaults are Ansor's.
  GbdtParams params;
  /// Until this many samples (programs with rows) have been seen, predict() returns random
  /// scores and update() does not train (Ansor's `num_warmup_sample`; under the task scheduler
  /// Ansor uses tasks × measures per round).
  int warmup_samples = 100;
  /// Weight each sample by its throughput (Ansor: w = y, so fast programs dominate the loss
  /// and failed ones are ignored); otherwise every sample weighs 1.
  bool weight_by_throughput = true;
  /// Learn from the first `num_features` features of each row only (0: all of them), e.g.
  /// kNumAnsorFeatures (cost/features.hpp) to measure what the later ones are worth.
  int num_features = 0;
  /// Seed of the random scores returned while warming up.
  uint64_t seed = 43;
};

/// Ansor's learned cost model over loom's Gbdt.
///
/// update() appends the samples and, once warm, retrains from scratch on all of them (Ansor
/// retrains after every measured batch: < 30,000 programs per network keep that cheap).
/// save() writes the trained Gbdt, not the samples; load() restores it and turns warm-up off,
/// so predictions are learned at once and the next update() retrains on the samples seen since.
class GbdtCostModel final : public CostModel {
 public:
  LOOM_DECL explicit GbdtCostModel(GbdtCostModelOptions options = {});

  /// Adds the samples; trains when at least `warmup_samples` have been seen (or after load()).
  /// Throws `[loom.cost.E967]` for a feature count that differs from earlier samples' (the
  /// first batch after load() may bring a newer layout's: the model is retrained on it).
  LOOM_DECL void update(const std::vector<ProgramFeatures>& programs,
                        const std::vector<double>& throughputs) override;
  /// Predicted throughputs (pack-sum of row predictions) once trained, uniform random scores in
  /// [0, 1) before; −∞ for a program without rows. Rows longer than the model's are read by
  /// their prefix (a model of an older feature layout, cost/features.hpp). Throws
  /// `[loom.cost.E967]` for rows shorter than the model's.
  LOOM_DECL std::vector<double> predict(
      const std::vector<ProgramFeatures>& programs) const override;
  /// Writes `loom-cost-model gbdt 1` and the trained Gbdt. Throws `[loom.cost.E964]` before
  /// the first training: there is nothing learned to save.
  LOOM_DECL void save(std::ostream& out) const override;
  /// Reads what save() wrote (errors of Gbdt::load pass through).
  LOOM_DECL void load(std::istream& in) override;
  std::string name() const override { return "gbdt"; }

  /// Whether predictions come from a trained model.
  bool trained() const { return trained_; }
  /// Samples kept for retraining (programs with rows passed to update()).
  size_t num_samples() const { return data_.labels.size(); }
  /// The current Gbdt (empty before the first training).
  const Gbdt& model() const { return model_; }
  /// The settings.
  const GbdtCostModelOptions& options() const { return options_; }

 private:
  GbdtCostModelOptions options_;
  GbdtDataset data_;
  Gbdt model_;
  bool trained_ = false;
  bool warm_ = false;  // loaded: train on every update whatever the sample count
  mutable std::mt19937_64 rng_;
};

/// Uniform random scores in [0, 1) from a seeded std::mt19937_64 (raw output, so the same on
/// every platform); learns nothing. save()/load() keep the seed, not the generator state.
class RandomCostModel final : public CostModel {
 public:
  LOOM_DECL explicit RandomCostModel(uint64_t seed = 43);

  /// Checks the arguments and learns nothing.
  LOOM_DECL void update(const std::vector<ProgramFeatures>& programs,
                        const std::vector<double>& throughputs) override;
  /// One uniform draw per program.
  LOOM_DECL std::vector<double> predict(
      const std::vector<ProgramFeatures>& programs) const override;
  /// Writes `loom-cost-model random 1` and the seed.
  LOOM_DECL void save(std::ostream& out) const override;
  /// Reads the seed and restarts the generator from it.
  LOOM_DECL void load(std::istream& in) override;
  std::string name() const override { return "random"; }

 private:
  uint64_t seed_;
  mutable std::mt19937_64 rng_;
};

/// A fixed formula over a few feature columns: a program's score is 1 / Σ over its rows of
/// `row_cost(selected values)`, where the selected values are the row's entries at
/// `feature_indices`, in that order. cost/features.hpp names the columns (`kFloatOpFeatures`
/// for the float operation counts, `buffer_feature(b, kBufferBytes)` for the bytes each buffer
/// moves, ...); this model only takes their indices, so it does not depend on the feature layout.
class AnalyticCostModel final : public CostModel {
 public:
  /// Estimated cost (time, any unit) of one row from its selected feature values; must be
  /// finite and the sum over a program's rows positive (`[loom.cost.E969]` otherwise).
  using RowCost = std::function<double(std::span<const float> selected)>;

  /// A model reading the columns `feature_indices` (each ≥ 0; `[loom.cost.E969]`) and costing
  /// each row with `row_cost`. `name` is what name() returns.
  LOOM_DECL AnalyticCostModel(std::vector<int> feature_indices, RowCost row_cost,
                              std::string name = "analytic");

  /// A roofline. A row's FLOPs are the sum of the columns `flops_features`, its bytes the sum
  /// of the columns `bytes_features`, and it costs max(FLOPs, flops_per_byte × bytes) + 1: the
  /// time of its arithmetic or of its memory traffic on a machine that does `flops_per_byte`
  /// FLOPs per byte moved, whichever is longer (+1 so that no row is free). With `log_scaled`
  /// the columns hold slog(x) = sign(x)·log2(1 + |x|), as cost/features.hpp stores them, and
  /// are decoded first; negative counts count as 0. Throws `[loom.cost.E969]` for a
  /// flops_per_byte that is not positive or an empty column list.
  LOOM_DECL static AnalyticCostModel roofline(const std::vector<int>& flops_features,
                                              const std::vector<int>& bytes_features,
                                              double flops_per_byte = 8.0, bool log_scaled = true);

  /// Learns nothing (checks the arguments).
  LOOM_DECL void update(const std::vector<ProgramFeatures>& programs,
                        const std::vector<double>& throughputs) override;
  /// 1 / Σ row costs per program; −∞ for a program without rows. Throws `[loom.cost.E969]`
  /// when a selected column is beyond a program's features or a cost is not usable.
  LOOM_DECL std::vector<double> predict(
      const std::vector<ProgramFeatures>& programs) const override;
  /// Writes `loom-cost-model analytic 1`, the name and the feature indices (the formula itself
  /// cannot be written).
  LOOM_DECL void save(std::ostream& out) const override;
  /// Checks that the file was written by an analytic model with the same feature indices
  /// (`[loom.cost.E968]` otherwise); the formula stays this model's.
  LOOM_DECL void load(std::istream& in) override;
  std::string name() const override { return name_; }

  /// The columns the formula reads.
  const std::vector<int>& feature_indices() const { return indices_; }

 private:
  std::vector<int> indices_;
  RowCost row_cost_;
  std::string name_;
};

// --- ranking metrics (ansor.md §4 and the paper's §7.5)
// -------------------------------------------

/// Fraction of the pairs of programs with different labels that `scores` order like `labels`
/// (a tie in score counts as half right). NaN when no pair has different labels. O(n log n).
/// Throws `[loom.cost.E957]` when the sizes differ.
LOOM_DECL double pairwise_accuracy(const std::vector<double>& scores,
                                   const std::vector<double>& labels);

/// |top-k by score ∩ top-k by label| / k, with k capped at the number of programs and ties
/// broken by position (earlier first). NaN when there are no programs or k is 0. Throws
/// `[loom.cost.E957]` when the sizes differ.
LOOM_DECL double recall_at_k(const std::vector<double>& scores, const std::vector<double>& labels,
                             size_t k);

/// Ansor's average-peak-score@n (`a-peak@32`): walk the top-n programs by score, take the
/// running maximum of their labels divided by the best label overall, and average it over the n
/// steps. 1 means the model's first pick is the best program. n is capped at the number of
/// programs; NaN when there are none, n is 0 or the best label is not positive. Throws
/// `[loom.cost.E957]` when the sizes differ.
LOOM_DECL double average_peak_score(const std::vector<double>& scores,
                                    const std::vector<double>& labels, size_t n);

}  // namespace cost
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/cost/impl/model.ipp"
#endif

#endif  // LOOM_COST_MODEL_HPP
