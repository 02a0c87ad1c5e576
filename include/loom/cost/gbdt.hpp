/// \file
/// `Gbdt`: loom's embedded gradient-boosted regression trees (layer cost/), the learner behind
/// the learned cost model (cost/model.hpp). It replaces the XGBoost that Ansor calls from Python
/// (ansor.md §4) with a small, dependency-free, deterministic C++ implementation.
///
/// What it does:
///  - **Objective: weighted squared error on group sums ("pack-sum").** The rows of one group
///    (one program: a row per innermost store statement) are contiguous; a group's prediction is
///    the sum of its rows' predictions. Each row gets gradient (Σ pred of its group − y) × w and
///    hessian w, with one label y and one weight w per group (Ansor passes w = y). A dataset
///    without group offsets is plain weighted regression: one row per group.
///  - **Histogram split finding.** Each feature gets at most `max_bins` quantile bins, computed
///    once per training from (a sample of) the rows; ties get one bin, so a feature that is mostly
///    exactly 0 keeps its other values apart, and a constant feature gets one bin and is never
///    split. Gradient/hessian histograms are built per node; the larger child's histogram is the
///    parent's minus the smaller child's.
///  - **Split rule (XGBoost's, pre-pruned).** With G, H the sums of a node and L, R its children,
///    gain = G_L²/(H_L+λ) + G_R²/(H_R+λ) − G²/(H+λ); a node splits at the best (feature, bin)
///    when gain > γ, both children have hessian ≥ `min_child_weight` (and > 0) and the depth is
///    below `max_depth`. A leaf's value is −G/(H+λ) × learning_rate. XGBoost prunes with γ after
///    growing; loom never grows the split in the first place (same trees unless a weak split has
///    strong children).
///  - **Growth.** Depth-wise: every node splits on its own rows only, so the tree equals the one
///    grown level by level; loom grows it depth first, which keeps one histogram per level alive.
///  - **Sampling.** Per tree, a `colsample` fraction of the features and a `subsample` fraction of
///    the groups, drawn from `std::mt19937_64(seed)` by raw output only (the standard fixes the
///    engine, not the distributions), so a seed gives bit-identical models on every platform and
///    for any `num_threads`.
///  - **Early stopping.** After every tree the pack-sum RMSE (unweighted, over groups) is computed
///    on the held-out groups (`validation_fraction`) or, as Ansor does, on the training groups;
///    training stops when it has not improved for `early_stopping_rounds` trees and the model
///    keeps the trees up to the best round.
///  - **Inference.** All trees live in one flat node array (16-byte nodes, leaves loop to
///    themselves), evaluated branch-free over blocks of rows; see predict_rows.
///  - **Storage.** A versioned text format (`loom-gbdt 1`), exact on round trip.
///
/// Errors are loom::user_error with ids `loom.cost.E950` – `loom.cost.E963`.
#ifndef LOOM_COST_GBDT_HPP
#define LOOM_COST_GBDT_HPP

#include "loom/config.hpp"
#include "loom/error.hpp"

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace cost {

/// Training parameters. The defaults are Ansor's XGBoost parameters (ansor.md §4) except where
/// marked; plain data, copy and edit freely. train() checks the ranges (`[loom.cost.E954]`).
struct GbdtParams {
  /// Maximum depth of a tree (the root has depth 0), in [1, 30].
  int max_depth = 10;
  /// Shrinkage applied to every leaf value (XGBoost `eta`), > 0.
  double learning_rate = 0.2;
  /// Minimum hessian sum of a child for a split to be allowed, ≥ 0. Whatever its value, a child
  /// must also have a positive hessian sum: rows of weight 0 carry no information.
  double min_child_weight = 0.0;
  /// L2 regularisation of the leaf values (XGBoost `lambda`), ≥ 0.
  double lambda = 1.0;
  /// Minimum gain of a split (XGBoost `gamma` / `min_split_loss`), ≥ 0.
  double gamma = 0.001;
  /// Fraction of the features each tree may split on, in (0, 1]; at least one feature.
  double colsample = 1.0;
  /// Fraction of the training groups each tree is grown on, in (0, 1]; at least one group.
  double subsample = 1.0;
  /// Maximum number of trees (boosting rounds), ≥ 0.
  int max_rounds = 10000;
  /// Stop when the pack-sum RMSE has not improved for this many trees; 0 disables early
  /// stopping (then all `max_rounds` trees are kept).
  int early_stopping_rounds = 50;
  /// loom addition: fraction of the groups held out to measure the RMSE for early stopping, in
  /// [0, 1). 0 (Ansor) measures it on the training groups. Held-out groups are never trained on.
  double validation_fraction = 0.0;
  /// loom addition (XGBoost `max_bin`): the most histogram bins per feature, in [2, 256].
  int max_bins = 64;
  /// Seed of the feature, group and validation sampling.
  uint64_t seed = 43;
  /// Threads for histogram building and prediction (0: loom's compile threads,
  /// loom/compile_threads.hpp). The model does not depend on it.
  int num_threads = 1;
};

/// A training set: a dense row-major feature matrix, optional group offsets, and one label and
/// one weight per group. Plain data; train() validates it.
struct GbdtDataset {
  /// `num_rows() × num_features` values, row-major. NaN is allowed and goes to the right child
  /// of every split.
  std::vector<float> features;
  /// Number of columns, ≥ 1.
  int num_features = 0;
  /// Empty: one row per group. Otherwise `num_groups + 1` non-decreasing offsets into the rows,
  /// from 0 to `num_rows()`: group g owns rows [group_offsets[g], group_offsets[g+1]). A group
  /// with no rows predicts 0.
  std::vector<size_t> group_offsets;
  /// One finite label per group.
  std::vector<double> labels;
  /// One finite weight ≥ 0 per group, or empty for weight 1 everywhere.
  std::vector<double> weights;

  /// `features.size() / num_features` (0 while num_features is 0).
  size_t num_rows() const { return num_features > 0 ? features.size() / num_features : 0; }
  /// `labels.size()`.
  size_t num_groups() const { return labels.size(); }
  /// Throws loom::user_error on a malformed dataset: `[loom.cost.E950]` feature matrix shape,
  /// `[loom.cost.E951]` group offsets, `[loom.cost.E952]` label or weight count,
  /// `[loom.cost.E953]` a non-finite label or a negative or non-finite weight.
  LOOM_DECL void validate() const;
};

/// What one training did (not saved with the model).
struct GbdtTrainInfo {
  /// Trees grown before stopping.
  int rounds_trained = 0;
  /// Trees kept: the round with the best RMSE (all rounds when early stopping is off).
  int best_rounds = 0;
  /// The pack-sum RMSE after `best_rounds` trees.
  double best_rmse = 0.0;
  /// Whether training stopped before `max_rounds`.
  bool stopped_early = false;
  /// Whether the RMSE was measured on held-out groups (otherwise on the training groups).
  bool on_validation = false;
  /// The pack-sum RMSE with 0, 1, 2, ... trees (`rounds_trained + 1` entries).
  std::vector<double> rmse_history;
};

/// A trained GBDT regressor: construct with train() or load(). A default-constructed model has
/// no features and no trees and predicts 0. Prediction is const and thread-safe.
class Gbdt {
 public:
  /// One node of the flat tree array. A split sends a row to `left` when
  /// `row[feature] <= threshold` (NaN goes right); a leaf has `threshold = +inf`, `feature = 0`
  /// and `left = right =` itself, so a fixed number of steps always ends on the leaf, and its
  /// value is in `leaf_values()` at the same index. Indices are into the whole array.
  struct Node {
    int32_t feature;
    float threshold;
    int32_t left;
    int32_t right;
  };
  static_assert(sizeof(Node) == 16, "Gbdt::Node must stay 16 bytes (four per cache line)");

  Gbdt() = default;

  /// Trains a model on `data`. Throws `[loom.cost.E950]`–`[loom.cost.E953]` for a malformed
  /// dataset (GbdtDataset::validate), `[loom.cost.E954]` for parameters out of range and
  /// `[loom.cost.E955]` when no group is left to train on.
  LOOM_DECL static Gbdt train(const GbdtDataset& data, const GbdtParams& params = {});

  /// Predicts `num_rows` rows of `num_features()` floats each (row-major) into `out`: the base
  /// score plus one leaf value per tree. Trees are the outer loop over blocks of 32 rows, so a
  /// tree stays in cache for the block and the block's descents run side by side.
  LOOM_DECL void predict_rows(const float* rows, size_t num_rows, float* out) const;
  /// predict_rows over a vector whose size must be a multiple of num_features()
  /// (`[loom.cost.E956]`).
  LOOM_DECL std::vector<float> predict_rows(const std::vector<float>& rows) const;
  /// Predicts the sums of groups of rows: `group_offsets` holds `num_groups + 1` non-decreasing
  /// offsets from 0 into `rows` (`[loom.cost.E951]` otherwise); `out` gets `num_groups` sums.
  LOOM_DECL void predict_groups(const float* rows, const size_t* group_offsets, size_t num_groups,
                                double* out) const;

  /// Writes the model as text: `loom-gbdt 1`, the parameters, the feature count, the base score
  /// and the trees. Floats are written in their shortest exact form, so load() rebuilds a model
  /// whose predictions are bit-identical.
  LOOM_DECL void save(std::ostream& out) const;
  /// Reads a model written by save(). Throws `[loom.cost.E960]` when the stream is not a
  /// loom-gbdt model, `[loom.cost.E961]` for another format version, `[loom.cost.E962]` for a
  /// truncated or unparsable file and `[loom.cost.E963]` for trees that are not well formed.
  LOOM_DECL static Gbdt load(std::istream& in);

  /// Number of feature columns the model was trained on (0 for an empty model).
  int num_features() const { return num_features_; }
  /// Number of trees.
  int num_trees() const { return static_cast<int>(tree_roots_.size()); }
  /// The constant every row prediction starts from: the weighted least-squares constant of the
  /// pack-sum objective, Σ w·n·y / Σ w·n² over groups of n rows.
  float base_score() const { return base_score_; }
  /// The parameters the model was trained with.
  const GbdtParams& params() const { return params_; }
  /// Statistics of the training that built this model (empty after load()).
  const GbdtTrainInfo& train_info() const { return info_; }
  /// All nodes of all trees, tree after tree.
  const std::vector<Node>& nodes() const { return nodes_; }
  /// The leaf value of every node (0 for splits), parallel to nodes().
  const std::vector<float>& leaf_values() const { return leaf_values_; }
  /// Index of each tree's root in nodes().
  const std::vector<int32_t>& tree_roots() const { return tree_roots_; }
  /// Number of split levels of each tree (the steps a descent takes).
  const std::vector<int32_t>& tree_depths() const { return tree_depths_; }

 private:
  GbdtParams params_;
  GbdtTrainInfo info_;
  int num_features_ = 0;
  float base_score_ = 0.0f;
  std::vector<Node> nodes_;
  std::vector<float> leaf_values_;
  std::vector<int32_t> tree_roots_;
  std::vector<int32_t> tree_depths_;
};

namespace detail {
/// Histogram bin edges of one feature from its sorted, NaN-free values (declared for the tests).
LOOM_DECL std::vector<float> quantile_edges(const std::vector<float>& sorted, int max_bins);
}  // namespace detail

}  // namespace cost
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/cost/impl/gbdt.ipp"
#endif

#endif  // LOOM_COST_GBDT_HPP
