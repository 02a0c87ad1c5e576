// Bodies of loom/cost/gbdt.hpp: binning, histogram tree growth, boosting with early stopping,
// blocked prediction and the text format.
#include "loom/cost/gbdt.hpp"

#include "loom/compile_threads.hpp"
#include "loom/detail/random.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <istream>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <system_error>
#include <thread>

LOOM_BEGIN_NAMESPACE
namespace cost {

namespace detail {

/// Rows per prediction block: their descents interleave, and the block's rows (21 KB at 164
/// features) stay in L1 while every tree passes over them. 16 to 128 measured within noise of
/// each other on a loaded machine.
inline constexpr size_t kPredictBlock = 32;
/// At most this many rows (evenly strided) are sorted to place the bin edges: 64 quantiles do
/// not need more, and sorting every row of a large set would cost more than a few trees.
inline constexpr size_t kEdgeSampleRows = 8192;
/// Work (rows × features) below which a histogram is built on one thread: spawning costs more.
inline constexpr size_t kParallelHistWork = size_t{1} << 17;

inline int resolve_threads(int n) { return n > 0 ? n : compile_threads(); }

using ::loom::detail::unit_draw;

/// A float strictly below `b` and at least `a` (a < b) halfway between them where possible: the
/// edge between two neighbouring distinct values. `x <= edge` must send `a` left and `b` right.
inline float edge_between(float a, float b) {
  float m = static_cast<float>(0.5 * (static_cast<double>(a) + static_cast<double>(b)));
  if (!(m < b) || !(m >= a)) m = a;
  return m;
}

/// Bin edges of one feature from its sorted, NaN-free sample values. Up to max_bins distinct
/// values each get their own bin. Otherwise bins are closed greedily at the distinct-value
/// boundary nearest to an equal share of what is left, so a value that fills many quantiles
/// (typically 0) gets one bin and the remaining bins are spread over the other values.
LOOM_DECL std::vector<float> quantile_edges(const std::vector<float>& sorted, int max_bins) {
  std::vector<float> edges;
  std::vector<float> distinct;
  std::vector<size_t> count;
  for (float v : sorted) {
    if (!distinct.empty() && distinct.back() == v) {
      ++count.back();
    } else {
      distinct.push_back(v);
      count.push_back(1);
    }
  }
  const size_t k = distinct.size();
  if (k <= 1) return edges;
  if (k <= static_cast<size_t>(max_bins)) {
    for (size_t i = 0; i + 1 < k; ++i) edges.push_back(edge_between(distinct[i], distinct[i + 1]));
    return edges;
  }
  double remaining = static_cast<double>(sorted.size());
  int bins_left = max_bins;
  double acc = 0;
  for (size_t i = 0; i < k && bins_left > 1; ++i) {
    const double c = static_cast<double>(count[i]);
    double target = remaining / bins_left;
    // Close before a value that would overshoot the share by more than stopping short does.
    if (acc > 0 && acc + c > target && acc + c - target > target - acc) {
      edges.push_back(edge_between(distinct[i - 1], distinct[i]));
      remaining -= acc;
      --bins_left;
      acc = 0;
      target = remaining / std::max(bins_left, 1);
      if (bins_left <= 1) break;
    }
    acc += c;
    if (acc >= target && i + 1 < k) {
      edges.push_back(edge_between(distinct[i], distinct[i + 1]));
      remaining -= acc;
      --bins_left;
      acc = 0;
    }
  }
  return edges;
}

/// The bin of `x`: the first edge not below it, so `bin(x) <= s` exactly when `x <= edges[s]`,
/// the test prediction uses. NaN takes the last bin, as it goes right at every split.
inline uint8_t bin_of(const std::vector<float>& edges, float x) {
  if (std::isnan(x)) return static_cast<uint8_t>(edges.size());
  // std::lower_bound without branches on the data (the comparisons are coin flips).
  const float* base = edges.data();
  size_t n = edges.size();
  if (n == 0) return 0;
  while (n > 1) {
    const size_t half = n / 2;
    base = base[half - 1] < x ? base + half : base;
    n -= half;
  }
  return static_cast<uint8_t>((base - edges.data()) + (*base < x ? 1 : 0));
}

/// Interleaved gradient and hessian sums (LightGBM's histogram entry).
struct GradPair {
  double g = 0;
  double h = 0;
};

/// The best split found in a node's histogram.
struct SplitChoice {
  double gain = -std::numeric_limits<double>::infinity();
  int feature = -1;
  int bin = -1;
  double gl = 0;
  double hl = 0;
};

/// The child a row takes at a node, without a branch: descents go either way about equally
/// often, so a conditional jump would be mispredicted half the time. NaN goes right.
inline int32_t next_node(const Gbdt::Node& n, float x) {
  const int32_t right = -static_cast<int32_t>(!(x <= n.threshold));  // all ones when right
  return n.left ^ ((n.left ^ n.right) & right);
}

/// Grows one tree and boosts; owns the binned data and the histogram buffers of one training.
///
/// Binned data comes in three layouts, each for the loop that reads it: column-major for the
/// partition of a node's rows on one feature, row-major for histograms built on several
/// threads (each thread owns a range of features), and a sparse row list for the single-thread
/// histogram. The sparse list leaves out each feature's most frequent bin (typically the bin of
/// 0, which most of Ansor's features hold most of the time); that bin is recovered as the node
/// total minus the other bins. Both histogram paths end with that recovery, so the model does
/// not depend on the thread count.
class Trainer {
 public:
  Trainer(const GbdtDataset& data, const GbdtParams& params)
      : data_(data),
        p_(params),
        nf_(data.num_features),
        rows_(data.num_rows()),
        threads_(resolve_threads(params.num_threads)) {}

  /// Runs the whole training and fills the model's arrays.
  void run(float& base_score, std::vector<Gbdt::Node>& nodes, std::vector<float>& leaf_values,
           std::vector<int32_t>& roots, std::vector<int32_t>& depths, GbdtTrainInfo& info);

 private:
  void split_groups(std::mt19937_64& rng);
  void make_bins();
  void select_features(std::mt19937_64& rng);
  void build_hist(size_t begin, size_t end, double G, double H, GradPair* hist) const;
  SplitChoice find_split(const GradPair* hist, double G, double H) const;
  int32_t grow(int32_t id, size_t begin, size_t end, int depth, double G, double H, GradPair* hist);
  GradPair* acquire();
  void release(GradPair* h) { free_.push_back(h); }
  void make_leaf(int32_t id, double G, double H, size_t begin, size_t end);
  bool can_split(size_t n, int depth, double H) const {
    return depth < p_.max_depth && n >= 2 && H >= 2 * min_hess_;
  }

  const GbdtDataset& data_;
  const GbdtParams& p_;
  const int nf_;
  const size_t rows_;
  const int threads_;

  std::vector<size_t> offsets_;  // group offsets (identity when the dataset has none)
  std::vector<double> weights_;
  std::vector<char> is_validation_;
  std::vector<uint32_t> train_groups_;

  std::vector<std::vector<float>> edges_;
  std::vector<uint32_t> hist_offset_;  // first histogram entry of each feature
  uint32_t total_bins_ = 0;            // histogram entries; one more (the last) is scratch
  std::vector<int32_t> usable_;        // features with at least two bins
  std::vector<uint8_t> default_bin_;   // per feature: its most frequent bin
  std::vector<uint8_t> bins_row_;      // rows × features, row-major
  std::vector<uint8_t> bins_col_;      // features × rows, column-major
  std::vector<size_t> entry_begin_;    // per row + 1: its range in entries_
  std::vector<uint32_t> entries_;      // histogram entries of the non-default bins, by row
  std::vector<uint32_t> remap_;        // per entry: itself if its feature is selected, else scratch
  double entries_per_row_ = 0;

  std::vector<GradPair> grad_;   // per row
  std::vector<double> pred_;     // per row, the model so far
  std::vector<uint32_t> index_;  // the rows of the current tree, partitioned by node
  std::vector<uint32_t> scratch_;
  std::vector<int32_t> features_;  // the features of the current tree
  bool all_features_ = true;       // features_ == usable_
  std::vector<char> in_tree_;      // per row: grown on by the current tree
  double min_hess_ = 0;

  std::vector<std::vector<GradPair>> hist_storage_;
  std::vector<GradPair*> free_;

  // The tree being grown.
  std::vector<Gbdt::Node> tree_;
  std::vector<float> tree_values_;
  int tree_depth_ = 0;
};

inline GradPair* Trainer::acquire() {
  if (free_.empty()) {
    hist_storage_.emplace_back(total_bins_ + 1);
    return hist_storage_.back().data();
  }
  GradPair* h = free_.back();
  free_.pop_back();
  return h;
}

inline void Trainer::split_groups(std::mt19937_64& rng) {
  const size_t groups = data_.num_groups();
  offsets_.resize(groups + 1);
  if (data_.group_offsets.empty()) {
    for (size_t g = 0; g <= groups; ++g) offsets_[g] = g;
  } else {
    offsets_ = data_.group_offsets;
  }
  weights_ = data_.weights.empty() ? std::vector<double>(groups, 1.0) : data_.weights;
  // Whole groups are held out: a program's rows share one label, so holding out some of its
  // rows would leave the others with a residual they cannot explain.
  is_validation_.assign(groups, 0);
  if (p_.validation_fraction > 0)
    for (size_t g = 0; g < groups; ++g) is_validation_[g] = unit_draw(rng) < p_.validation_fraction;
  for (size_t g = 0; g < groups; ++g)
    if (!is_validation_[g]) train_groups_.push_back(static_cast<uint32_t>(g));
}

inline void Trainer::make_bins() {
  std::vector<uint32_t> train_rows;
  for (uint32_t g : train_groups_)
    for (size_t r = offsets_[g]; r < offsets_[g + 1]; ++r)
      train_rows.push_back(static_cast<uint32_t>(r));
  std::vector<uint32_t> sample;
  if (train_rows.size() <= kEdgeSampleRows) {
    sample = train_rows;
  } else {
    for (size_t i = 0; i < kEdgeSampleRows; ++i)
      sample.push_back(train_rows[i * train_rows.size() / kEdgeSampleRows]);
  }
  edges_.assign(nf_, {});
  hist_offset_.assign(nf_ + 1, 0);
  std::vector<float> column;
  column.reserve(sample.size());
  for (int f = 0; f < nf_; ++f) {
    column.clear();
    for (uint32_t r : sample) {
      const float v = data_.features[static_cast<size_t>(r) * nf_ + f];
      if (!std::isnan(v)) column.push_back(v);
    }
    std::sort(column.begin(), column.end());
    edges_[f] = quantile_edges(column, p_.max_bins);
    hist_offset_[f + 1] = hist_offset_[f] + static_cast<uint32_t>(edges_[f].size() + 1);
    if (!edges_[f].empty()) usable_.push_back(f);
  }
  total_bins_ = hist_offset_[nf_];

  bins_row_.resize(rows_ * nf_);
  bins_col_.resize(rows_ * nf_);
  std::vector<uint32_t> count(total_bins_, 0);
  for (size_t r = 0; r < rows_; ++r) {
    const float* x = &data_.features[r * nf_];
    uint8_t* b = &bins_row_[r * nf_];
    for (int f = 0; f < nf_; ++f) {
      b[f] = bin_of(edges_[f], x[f]);
      ++count[hist_offset_[f] + b[f]];
    }
  }
  // Transposed in tiles of 64 rows, so that each column's writes fill whole cache lines.
  constexpr size_t kTile = 64;
  for (size_t r0 = 0; r0 < rows_; r0 += kTile) {
    const size_t r1 = std::min(rows_, r0 + kTile);
    for (int f = 0; f < nf_; ++f) {
      uint8_t* col = &bins_col_[static_cast<size_t>(f) * rows_];
      for (size_t r = r0; r < r1; ++r) col[r] = bins_row_[r * nf_ + f];
    }
  }
  // Which bin is left out of the sparse rows changes only the order of additions, never which
  // split wins, so counting every row (held-out ones too) is fine.
  default_bin_.assign(nf_, 0);
  for (int f = 0; f < nf_; ++f) {
    const auto first = count.begin() + hist_offset_[f];
    default_bin_[f] =
        static_cast<uint8_t>(std::max_element(first, count.begin() + hist_offset_[f + 1]) - first);
  }
  // Appended without a branch (whether a value is the default is a coin flip for many
  // features): every entry is written, and only the non-default ones advance the end.
  entry_begin_.assign(rows_ + 1, 0);
  entries_.resize(rows_ * usable_.size());
  size_t n = 0;
  for (size_t r = 0; r < rows_; ++r) {
    const uint8_t* b = &bins_row_[r * nf_];
    for (int f : usable_) {
      entries_[n] = hist_offset_[f] + b[f];
      n += b[f] != default_bin_[f] ? 1 : 0;
    }
    entry_begin_[r + 1] = n;
  }
  entries_.resize(n);
  entries_.shrink_to_fit();
  entries_per_row_ = rows_ ? static_cast<double>(entries_.size()) / static_cast<double>(rows_) : 0;
}

inline void Trainer::select_features(std::mt19937_64& rng) {
  features_ = usable_;
  all_features_ = true;
  if (!(p_.colsample < 1.0) || features_.empty()) return;
  const size_t n = features_.size();
  const size_t k = std::clamp<size_t>(
      static_cast<size_t>(std::llround(p_.colsample * static_cast<double>(n))), 1, n);
  for (size_t i = 0; i < k; ++i) std::swap(features_[i], features_[i + rng() % (n - i)]);
  features_.resize(k);
  std::sort(features_.begin(), features_.end());
  all_features_ = k == n;
  remap_.assign(total_bins_ + 1, total_bins_);
  for (int f : features_)
    for (uint32_t e = hist_offset_[f]; e < hist_offset_[f + 1]; ++e) remap_[e] = e;
}

inline void Trainer::build_hist(size_t begin, size_t end, double G, double H,
                                GradPair* hist) const {
  const size_t nsel = features_.size();
  for (int f : features_) std::fill(hist + hist_offset_[f], hist + hist_offset_[f + 1], GradPair{});
  if (threads_ > 1 && (end - begin) * nsel >= kParallelHistWork) {
    ::loom::detail::parallel_chunks(nsel, static_cast<size_t>(threads_), [&](size_t f0, size_t f1) {
      for (size_t i = begin; i < end; ++i) {
        const uint32_t r = index_[i];
        const GradPair gh = grad_[r];
        const uint8_t* b = &bins_row_[static_cast<size_t>(r) * nf_];
        for (size_t j = f0; j < f1; ++j) {
          const int f = features_[j];
          GradPair& e = hist[hist_offset_[f] + b[f]];
          e.g += gh.g;
          e.h += gh.h;
        }
      }
    });
  } else {
    hist[total_bins_] = GradPair{};
    const uint32_t* entries = entries_.data();
    for (size_t i = begin; i < end; ++i) {
      const uint32_t r = index_[i];
      const GradPair gh = grad_[r];
      const size_t k0 = entry_begin_[r], k1 = entry_begin_[r + 1];
      if (all_features_) {
        for (size_t k = k0; k < k1; ++k) {
          GradPair& e = hist[entries[k]];
          e.g += gh.g;
          e.h += gh.h;
        }
      } else {
        for (size_t k = k0; k < k1; ++k) {
          GradPair& e = hist[remap_[entries[k]]];
          e.g += gh.g;
          e.h += gh.h;
        }
      }
    }
  }
  // The most frequent bin: the node total minus the other bins.
  for (int f : features_) {
    GradPair* h = hist + hist_offset_[f];
    const int nb = static_cast<int>(hist_offset_[f + 1] - hist_offset_[f]);
    const int def = default_bin_[f];
    h[def] = GradPair{};  // the threaded path has summed it
    double g = 0, hh = 0;
    for (int b = 0; b < nb; ++b) {
      g += h[b].g;
      hh += h[b].h;
    }
    h[def] = GradPair{G - g, H - hh};
  }
}

inline SplitChoice Trainer::find_split(const GradPair* hist, double G, double H) const {
  // The children's score GL²/(HL+λ) + GR²/(HR+λ) is kept as a fraction num/den and candidates
  // are compared by cross-multiplying: two divisions per bin were half of the training time.
  // Starting from −1/0, the first candidate always wins.
  const double lambda = p_.lambda;
  double best_num = -1, best_den = 0;
  int best_f = -1, best_b = -1;
  double best_gl = 0, best_hl = 0;
  for (int f : features_) {
    const GradPair* h = hist + hist_offset_[f];
    // Every row of the node in the feature's most frequent bin (common for small nodes): no
    // split on this feature. Only a shortcut; the scan would find no candidate either.
    if (h[default_bin_[f]].h == H) continue;
    const int last = static_cast<int>(edges_[f].size());  // bins 0..last; split after bin b < last
    double gl = 0, hl = 0;
    for (int b = 0; b < last; ++b) {
      gl += h[b].g;
      hl += h[b].h;
      if (hl < min_hess_) continue;
      const double hr = H - hl;
      if (hr < min_hess_) break;
      const double gr = G - gl;
      const double dl = hl + lambda, dr = hr + lambda;
      const double num = gl * gl * dr + gr * gr * dl, den = dl * dr;
      if (num * best_den > best_num * den) {
        best_num = num;
        best_den = den;
        best_f = f;
        best_b = b;
        best_gl = gl;
        best_hl = hl;
      }
    }
  }
  SplitChoice best;
  if (best_f >= 0)
    best =
        SplitChoice{best_num / best_den - G * G / (H + lambda), best_f, best_b, best_gl, best_hl};
  return best;
}

inline void Trainer::make_leaf(int32_t id, double G, double H, size_t begin, size_t end) {
  const float v = static_cast<float>(-G / (H + p_.lambda) * p_.learning_rate);
  tree_[id] = Gbdt::Node{0, std::numeric_limits<float>::infinity(), id, id};
  tree_values_[id] = v;
  for (size_t i = begin; i < end; ++i) pred_[index_[i]] += static_cast<double>(v);
}

// Fills node `id` (already allocated) from rows [begin, end) of index_ and owns `hist` (null when
// the node cannot split). Children are allocated next to each other when their parent splits.
inline int32_t Trainer::grow(int32_t id, size_t begin, size_t end, int depth, double G, double H,
                             GradPair* hist) {
  SplitChoice s;
  if (hist) {
    s = find_split(hist, G, H);
    if (s.feature < 0 || !(s.gain > p_.gamma)) {
      release(hist);
      hist = nullptr;
      s.feature = -1;
    }
  }
  if (s.feature < 0) {
    make_leaf(id, G, H, begin, end);
    return id;
  }
  tree_depth_ = std::max(tree_depth_, depth + 1);

  // Stable partition: left rows stay in place in order, right rows go through the scratch.
  size_t mid = begin;
  size_t nright = 0;
  const int f = s.feature;
  const uint8_t* column = &bins_col_[static_cast<size_t>(f) * rows_];
  for (size_t i = begin; i < end; ++i) {
    const uint32_t r = index_[i];
    if (column[r] <= s.bin)
      index_[mid++] = r;
    else
      scratch_[nright++] = r;
  }
  std::copy(scratch_.begin(), scratch_.begin() + nright, index_.begin() + mid);

  const double gl = s.gl, hl = s.hl, gr = G - s.gl, hr = H - s.hl;
  const size_t nl = mid - begin, nr = end - mid;
  const bool need_l = can_split(nl, depth + 1, hl);
  const bool need_r = can_split(nr, depth + 1, hr);
  GradPair* hist_l = nullptr;
  GradPair* hist_r = nullptr;
  // A child that cannot split needs no histogram. When both need one, the smaller is built
  // and the larger is the parent minus it, unless the larger is so small that building it
  // costs less than subtracting every bin. Costs count histogram updates: building visits the
  // stored entries of each row (selected features or not), subtracting every selected bin.
  const double per_row = std::max(entries_per_row_, 1.0);
  const double bins_sel = all_features_ ? static_cast<double>(total_bins_)
                                        : static_cast<double>(features_.size()) *
                                              (static_cast<double>(total_bins_) / nf_);
  auto build_cost = [&](size_t n) { return static_cast<double>(n) * per_row; };
  auto subtract_into_parent = [&](const GradPair* small) {
    for (int ff : features_)
      for (uint32_t k = hist_offset_[ff]; k < hist_offset_[ff + 1]; ++k) {
        hist[k].g -= small[k].g;
        hist[k].h -= small[k].h;
      }
  };
  if (need_l && need_r) {
    const bool left_small = nl <= nr;
    const size_t nlarge = left_small ? nr : nl;
    GradPair* small = acquire();
    if (left_small)
      build_hist(begin, mid, gl, hl, small);
    else
      build_hist(mid, end, gr, hr, small);
    if (build_cost(nlarge) < bins_sel) {
      if (left_small)
        build_hist(mid, end, gr, hr, hist);
      else
        build_hist(begin, mid, gl, hl, hist);
    } else {
      subtract_into_parent(small);
    }
    hist_l = left_small ? small : hist;
    hist_r = left_small ? hist : small;
  } else if (need_l || need_r) {
    const size_t nneed = need_l ? nl : nr, nother = need_l ? nr : nl;
    if (build_cost(nother) + bins_sel < build_cost(nneed)) {
      GradPair* other = acquire();
      if (need_l)
        build_hist(mid, end, gr, hr, other);
      else
        build_hist(begin, mid, gl, hl, other);
      subtract_into_parent(other);
      release(other);
    } else if (need_l) {
      build_hist(begin, mid, gl, hl, hist);
    } else {
      build_hist(mid, end, gr, hr, hist);
    }
    (need_l ? hist_l : hist_r) = hist;
  } else {
    release(hist);
  }

  const int32_t left = static_cast<int32_t>(tree_.size());
  tree_.resize(tree_.size() + 2);
  tree_values_.resize(tree_values_.size() + 2, 0.0f);
  tree_[id] = Gbdt::Node{f, edges_[f][s.bin], left, left + 1};
  tree_values_[id] = 0.0f;
  grow(left, begin, mid, depth + 1, gl, hl, hist_l);
  grow(left + 1, mid, end, depth + 1, gr, hr, hist_r);
  return id;
}

inline void Trainer::run(float& base_score, std::vector<Gbdt::Node>& nodes,
                         std::vector<float>& leaf_values, std::vector<int32_t>& roots,
                         std::vector<int32_t>& depths, GbdtTrainInfo& info) {
  std::mt19937_64 rng(p_.seed);
  split_groups(rng);
  LOOM_USER_CHECK(!train_groups_.empty(), "loom.cost.E955")
      << "Gbdt::train has no group to train on (" << data_.num_groups() << " groups, "
      << (data_.num_groups() - train_groups_.size())
      << " held out for validation): pass more data or a smaller validation_fraction";
  make_bins();

  // The constant that minimises Σ w (n·c − y)² over the training groups of n rows.
  double num = 0, den = 0;
  for (uint32_t g : train_groups_) {
    const double n = static_cast<double>(offsets_[g + 1] - offsets_[g]);
    num += weights_[g] * n * data_.labels[g];
    den += weights_[g] * n * n;
  }
  base_score = den > 0 ? static_cast<float>(num / den) : 0.0f;

  const size_t groups = data_.num_groups();
  pred_.assign(rows_, static_cast<double>(base_score));
  grad_.assign(rows_, GradPair{});
  index_.reserve(rows_);
  scratch_.resize(rows_);
  in_tree_.assign(rows_, 0);
  double total_weight = 0;
  for (uint32_t g : train_groups_) total_weight += weights_[g];
  // Hessian floor of a child: min_child_weight, but always a positive share of the node mass so
  // that a child of weight-0 rows (whose gradients are 0 too) is never split off.
  min_hess_ = std::max(p_.min_child_weight, 1e-12 * std::max(total_weight, 1e-300));

  size_t num_eval = 0;
  for (size_t g = 0; g < groups; ++g) num_eval += is_validation_[g] ? 1 : 0;
  info.on_validation = num_eval > 0;
  if (!info.on_validation) num_eval = train_groups_.size();

  std::vector<double> group_sum(groups);
  int best_round = 0;
  double best_rmse = std::numeric_limits<double>::infinity();
  info.stopped_early = false;
  for (int round = 0;; ++round) {
    // The model with `round` trees: group sums, the RMSE that drives early stopping.
    double sq = 0;
    for (size_t g = 0; g < groups; ++g) {
      double s = 0;
      for (size_t r = offsets_[g]; r < offsets_[g + 1]; ++r) s += pred_[r];
      group_sum[g] = s;
      if (static_cast<bool>(is_validation_[g]) == info.on_validation) {
        const double d = s - data_.labels[g];
        sq += d * d;
      }
    }
    const double rmse = std::sqrt(sq / static_cast<double>(num_eval));
    info.rmse_history.push_back(rmse);
    if (p_.early_stopping_rounds == 0 || rmse < best_rmse) {
      best_rmse = rmse;
      best_round = round;
    } else if (round - best_round >= p_.early_stopping_rounds) {
      info.stopped_early = round < p_.max_rounds;
      info.rounds_trained = round;
      break;
    }
    if (round == p_.max_rounds) {
      info.rounds_trained = round;
      break;
    }

    // Row and feature sampling for this tree.
    index_.clear();
    // Groups, not rows, are sampled, for the reason groups are held out (split_groups). No draw
    // is made when nothing is sampled, so subsample = 1 consumes no randomness.
    const bool sample_groups = p_.subsample < 1.0;
    for (uint32_t g : train_groups_) {
      if (sample_groups && !(unit_draw(rng) < p_.subsample)) continue;
      for (size_t r = offsets_[g]; r < offsets_[g + 1]; ++r)
        index_.push_back(static_cast<uint32_t>(r));
    }
    if (index_.empty()) {
      const uint32_t g = train_groups_[rng() % train_groups_.size()];
      for (size_t r = offsets_[g]; r < offsets_[g + 1]; ++r)
        index_.push_back(static_cast<uint32_t>(r));
    }
    select_features(rng);

    // Pack-sum gradients: every row of a group shares its group's residual.
    double G = 0, H = 0;
    for (uint32_t r : index_) in_tree_[r] = 1;
    for (uint32_t g : train_groups_) {
      const double w = weights_[g];
      const GradPair gh{(group_sum[g] - data_.labels[g]) * w, w};
      for (size_t r = offsets_[g]; r < offsets_[g + 1]; ++r) grad_[r] = gh;
    }
    for (uint32_t r : index_) {
      G += grad_[r].g;
      H += grad_[r].h;
    }

    tree_.assign(1, Gbdt::Node{});
    tree_values_.assign(1, 0.0f);
    tree_depth_ = 0;
    GradPair* root_hist = nullptr;
    if (can_split(index_.size(), 0, H) && !features_.empty()) {
      root_hist = acquire();
      build_hist(0, index_.size(), G, H, root_hist);
    }
    grow(0, 0, index_.size(), 0, G, H, root_hist);

    // Rows the tree was not grown on (sampled out, held out) get its prediction by descent.
    const int32_t base = static_cast<int32_t>(nodes.size());
    for (size_t r = 0; r < rows_; ++r) {
      if (in_tree_[r]) {
        in_tree_[r] = 0;
        continue;
      }
      const float* x = &data_.features[r * nf_];
      int32_t k = 0;
      for (int d = 0; d < tree_depth_; ++d) k = next_node(tree_[k], x[tree_[k].feature]);
      pred_[r] += static_cast<double>(tree_values_[k]);
    }
    roots.push_back(base);
    depths.push_back(tree_depth_);
    for (Gbdt::Node n : tree_) {
      n.left += base;
      n.right += base;
      nodes.push_back(n);
    }
    leaf_values.insert(leaf_values.end(), tree_values_.begin(), tree_values_.end());
  }

  // Keep the trees up to the best round: the later ones only made the watched RMSE worse.
  info.best_rounds = best_round;
  info.best_rmse = best_rmse;
  if (static_cast<int>(roots.size()) > best_round) {
    const size_t keep = static_cast<size_t>(roots[best_round]);
    nodes.resize(keep);
    leaf_values.resize(keep);
    roots.resize(best_round);
    depths.resize(best_round);
  }
}

// --- text format ---------------------------------------------------------------------------------

/// Shortest exact decimal form of a float or double (std::to_chars), locale-independent.
template <class T>
std::string exact(T v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

/// Whitespace-separated tokens of a model file, with errors that say what was expected.
class TokenReader {
 public:
  explicit TokenReader(std::istream& in) : in_(in) {}

  std::string word(const char* what) {
    std::string tok;
    LOOM_USER_CHECK(static_cast<bool>(in_ >> tok), "loom.cost.E962")
        << "Gbdt::load: the model file is truncated: expected " << what
        << " but the stream ended; write it again with Gbdt::save";
    return tok;
  }
  void expect(const char* keyword) {
    const std::string tok = word(keyword);
    LOOM_USER_CHECK(tok == keyword, "loom.cost.E962")
        << "Gbdt::load: the model file is malformed: expected '" << keyword << "' but found '"
        << tok << "'; write it again with Gbdt::save";
  }
  template <class T>
  T number(const char* what) {
    const std::string tok = word(what);
    T v{};
    const auto res = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    LOOM_USER_CHECK(res.ec == std::errc() && res.ptr == tok.data() + tok.size(), "loom.cost.E962")
        << "Gbdt::load: the model file is malformed: expected " << what << " but found '" << tok
        << "'; write it again with Gbdt::save";
    return v;
  }
  template <class T>
  T keyed(const char* key) {
    expect(key);
    return number<T>(key);
  }

 private:
  std::istream& in_;
};

}  // namespace detail

// --- GbdtDataset ---------------------------------------------------------------------------------

LOOM_DECL void GbdtDataset::validate() const {
  LOOM_USER_CHECK(num_features > 0, "loom.cost.E950")
      << "GbdtDataset has num_features = " << num_features
      << "; set it to the number of columns of the feature matrix (at least 1)";
  LOOM_USER_CHECK(features.size() % static_cast<size_t>(num_features) == 0, "loom.cost.E950")
      << "GbdtDataset has " << features.size() << " feature values, not a multiple of "
      << num_features << " features per row; pass a rows × num_features row-major matrix";
  const size_t rows = num_rows();
  LOOM_USER_CHECK(rows < (size_t{1} << 31), "loom.cost.E950")
      << "GbdtDataset has " << rows << " rows; Gbdt supports fewer than 2^31";
  if (group_offsets.empty()) {
    LOOM_USER_CHECK(labels.size() == rows, "loom.cost.E952")
        << "GbdtDataset has " << labels.size() << " labels for " << rows
        << " rows and no group offsets; pass one label per row, or group offsets";
  } else {
    LOOM_USER_CHECK(group_offsets.front() == 0 && group_offsets.back() == rows, "loom.cost.E951")
        << "GbdtDataset group offsets run from " << group_offsets.front() << " to "
        << group_offsets.back() << " but must run from 0 to the row count " << rows;
    for (size_t g = 0; g + 1 < group_offsets.size(); ++g)
      LOOM_USER_CHECK(group_offsets[g] <= group_offsets[g + 1], "loom.cost.E951")
          << "GbdtDataset group offsets decrease at group " << g << " (" << group_offsets[g]
          << " then " << group_offsets[g + 1]
          << "); the rows of a group must be contiguous and the offsets non-decreasing";
    LOOM_USER_CHECK(labels.size() + 1 == group_offsets.size(), "loom.cost.E952")
        << "GbdtDataset has " << labels.size() << " labels for " << group_offsets.size() - 1
        << " groups; pass one label per group";
  }
  LOOM_USER_CHECK(weights.empty() || weights.size() == labels.size(), "loom.cost.E952")
      << "GbdtDataset has " << weights.size() << " weights for " << labels.size()
      << " groups; pass one weight per group, or none for weight 1";
  for (size_t g = 0; g < labels.size(); ++g)
    LOOM_USER_CHECK(std::isfinite(labels[g]), "loom.cost.E953")
        << "GbdtDataset label " << g << " is " << labels[g] << "; labels must be finite";
  for (size_t g = 0; g < weights.size(); ++g)
    LOOM_USER_CHECK(std::isfinite(weights[g]) && weights[g] >= 0, "loom.cost.E953")
        << "GbdtDataset weight " << g << " is " << weights[g]
        << "; weights must be finite and non-negative";
}

// --- Gbdt ----------------------------------------------------------------------------------------

namespace detail {

inline void check_params(const GbdtParams& p) {
  auto fail = [](const char* name, const auto& value, const char* range) {
    LOOM_USER_FAIL("loom.cost.E954")
        << "GbdtParams::" << name << " = " << value << " is out of range; it must be " << range;
  };
  if (p.max_depth < 1 || p.max_depth > 30) fail("max_depth", p.max_depth, "in [1, 30]");
  if (!(p.learning_rate > 0) || !std::isfinite(p.learning_rate))
    fail("learning_rate", p.learning_rate, "finite and > 0");
  if (!(p.min_child_weight >= 0) || !std::isfinite(p.min_child_weight))
    fail("min_child_weight", p.min_child_weight, "finite and >= 0");
  if (!(p.lambda >= 0) || !std::isfinite(p.lambda)) fail("lambda", p.lambda, "finite and >= 0");
  if (!(p.gamma >= 0) || !std::isfinite(p.gamma)) fail("gamma", p.gamma, "finite and >= 0");
  if (!(p.colsample > 0 && p.colsample <= 1)) fail("colsample", p.colsample, "in (0, 1]");
  if (!(p.subsample > 0 && p.subsample <= 1)) fail("subsample", p.subsample, "in (0, 1]");
  if (p.max_rounds < 0) fail("max_rounds", p.max_rounds, ">= 0");
  if (p.early_stopping_rounds < 0)
    fail("early_stopping_rounds", p.early_stopping_rounds, ">= 0 (0 disables early stopping)");
  if (!(p.validation_fraction >= 0 && p.validation_fraction < 1))
    fail("validation_fraction", p.validation_fraction, "in [0, 1)");
  if (p.max_bins < 2 || p.max_bins > 256) fail("max_bins", p.max_bins, "in [2, 256]");
  if (p.num_threads < 0) fail("num_threads", p.num_threads, ">= 0 (0: loom's compile threads)");
}

}  // namespace detail

LOOM_DECL Gbdt Gbdt::train(const GbdtDataset& data, const GbdtParams& params) {
  data.validate();
  detail::check_params(params);
  Gbdt model;
  model.params_ = params;
  model.num_features_ = data.num_features;
  detail::Trainer trainer(data, params);
  trainer.run(model.base_score_, model.nodes_, model.leaf_values_, model.tree_roots_,
              model.tree_depths_, model.info_);
  return model;
}

LOOM_DECL void Gbdt::predict_rows(const float* rows, size_t num_rows, float* out) const {
  using detail::kPredictBlock;
  const size_t nf = static_cast<size_t>(num_features_);
  const Node* nodes = nodes_.data();
  const float* values = leaf_values_.data();
  const size_t trees = tree_roots_.size();
  auto run = [&](size_t first_block, size_t last_block) {
    for (size_t blk = first_block; blk < last_block; ++blk) {
      const size_t s = blk * kPredictBlock;
      const size_t m = std::min(kPredictBlock, num_rows - s);
      const float* x = rows + s * nf;
      float acc[kPredictBlock];
      int32_t idx[kPredictBlock];
      std::fill(acc, acc + m, base_score_);
      for (size_t t = 0; t < trees; ++t) {
        const int32_t root = tree_roots_[t];
        const int depth = tree_depths_[t];
        std::fill(idx, idx + m, root);
        // Every descent takes `depth` steps (leaves loop to themselves), so the descents of a
        // level run without data-dependent branches and overlap in the pipeline.
        for (int d = 0; d < depth; ++d)
          for (size_t i = 0; i < m; ++i) {
            const Node& n = nodes[idx[i]];
            idx[i] = detail::next_node(n, x[i * nf + static_cast<size_t>(n.feature)]);
          }
        for (size_t i = 0; i < m; ++i) acc[i] += values[idx[i]];
      }
      std::copy(acc, acc + m, out + s);
    }
  };
  const size_t blocks = (num_rows + kPredictBlock - 1) / kPredictBlock;
  const int threads = detail::resolve_threads(params_.num_threads);
  if (threads > 1 && blocks >= 2 * static_cast<size_t>(threads) && trees > 0)
    ::loom::detail::parallel_chunks(blocks, static_cast<size_t>(threads), run, threads);
  else
    run(0, blocks);
}

LOOM_DECL std::vector<float> Gbdt::predict_rows(const std::vector<float>& rows) const {
  const size_t nf = static_cast<size_t>(std::max(num_features_, 1));
  LOOM_USER_CHECK(num_features_ > 0 ? rows.size() % nf == 0 : rows.empty(), "loom.cost.E956")
      << "Gbdt::predict_rows got " << rows.size() << " values, not a multiple of the model's "
      << num_features_ << " features per row";
  std::vector<float> out(rows.size() / nf);
  predict_rows(rows.data(), out.size(), out.data());
  return out;
}

LOOM_DECL void Gbdt::predict_groups(const float* rows, const size_t* group_offsets,
                                    size_t num_groups, double* out) const {
  LOOM_USER_CHECK(group_offsets[0] == 0, "loom.cost.E951")
      << "Gbdt::predict_groups: the group offsets must start at 0, not " << group_offsets[0];
  for (size_t g = 0; g < num_groups; ++g)
    LOOM_USER_CHECK(group_offsets[g] <= group_offsets[g + 1], "loom.cost.E951")
        << "Gbdt::predict_groups: the group offsets decrease at group " << g << " ("
        << group_offsets[g] << " then " << group_offsets[g + 1] << ")";
  // Rows first, then sums: the blocked row predictor is much faster than a walk per group.
  std::vector<float> row_pred(group_offsets[num_groups]);
  predict_rows(rows, row_pred.size(), row_pred.data());
  for (size_t g = 0; g < num_groups; ++g) {
    double s = 0;
    for (size_t r = group_offsets[g]; r < group_offsets[g + 1]; ++r) s += row_pred[r];
    out[g] = s;
  }
}

LOOM_DECL void Gbdt::save(std::ostream& out) const {
  using detail::exact;
  const GbdtParams& p = params_;
  out << "loom-gbdt 1\n"
      << "params max_depth " << p.max_depth << " learning_rate " << exact(p.learning_rate)
      << " min_child_weight " << exact(p.min_child_weight) << " lambda " << exact(p.lambda)
      << " gamma " << exact(p.gamma) << " colsample " << exact(p.colsample) << " subsample "
      << exact(p.subsample) << " max_rounds " << p.max_rounds << " early_stopping_rounds "
      << p.early_stopping_rounds << " validation_fraction " << exact(p.validation_fraction)
      << " max_bins " << p.max_bins << " seed " << p.seed << " num_threads " << p.num_threads
      << "\nnum_features " << num_features_ << "\nbase_score " << exact(base_score_) << "\ntrees "
      << tree_roots_.size() << '\n';
  for (size_t t = 0; t < tree_roots_.size(); ++t) {
    const int32_t begin = tree_roots_[t];
    const int32_t end =
        t + 1 < tree_roots_.size() ? tree_roots_[t + 1] : static_cast<int32_t>(nodes_.size());
    out << "tree " << t << " nodes " << (end - begin) << '\n';
    // Child indices are written relative to the tree's root, so trees can be read alone.
    for (int32_t k = begin; k < end; ++k) {
      const Node& n = nodes_[k];
      if (n.left == k)
        out << "leaf " << exact(leaf_values_[k]) << '\n';
      else
        out << "split " << n.feature << ' ' << exact(n.threshold) << ' ' << (n.left - begin) << ' '
            << (n.right - begin) << '\n';
    }
  }
  out << "end\n";
}

LOOM_DECL Gbdt Gbdt::load(std::istream& in) {
  detail::TokenReader rd(in);
  std::string magic;
  in >> magic;
  LOOM_USER_CHECK(magic == "loom-gbdt", "loom.cost.E960")
      << "Gbdt::load: the stream does not hold a loom-gbdt model (it starts with '" << magic
      << "'); pass a file written by Gbdt::save";
  const std::string version = rd.word("the format version");
  LOOM_USER_CHECK(version == "1", "loom.cost.E961")
      << "Gbdt::load: the model is in loom-gbdt format version " << version
      << " but this loom reads version 1; write it again with this loom's Gbdt::save";

  Gbdt m;
  GbdtParams& p = m.params_;
  // Keys are read in the order save() writes them: a file with other keys is another version.
  rd.expect("params");
  p.max_depth = rd.keyed<int>("max_depth");
  p.learning_rate = rd.keyed<double>("learning_rate");
  p.min_child_weight = rd.keyed<double>("min_child_weight");
  p.lambda = rd.keyed<double>("lambda");
  p.gamma = rd.keyed<double>("gamma");
  p.colsample = rd.keyed<double>("colsample");
  p.subsample = rd.keyed<double>("subsample");
  p.max_rounds = rd.keyed<int>("max_rounds");
  p.early_stopping_rounds = rd.keyed<int>("early_stopping_rounds");
  p.validation_fraction = rd.keyed<double>("validation_fraction");
  p.max_bins = rd.keyed<int>("max_bins");
  p.seed = rd.keyed<uint64_t>("seed");
  p.num_threads = rd.keyed<int>("num_threads");
  m.num_features_ = rd.keyed<int>("num_features");
  m.base_score_ = rd.keyed<float>("base_score");
  const long long trees = rd.keyed<long long>("trees");
  LOOM_USER_CHECK(m.num_features_ >= 0 && trees >= 0 && (trees == 0 || m.num_features_ > 0),
                  "loom.cost.E963")
      << "Gbdt::load: the model has " << trees << " trees over " << m.num_features_
      << " features; a model with trees needs at least one feature";
  for (long long t = 0; t < trees; ++t) {
    rd.expect("tree");
    LOOM_USER_CHECK(rd.number<long long>("the tree number") == t, "loom.cost.E962")
        << "Gbdt::load: the model file is malformed: tree " << t << " is numbered differently";
    const long long count = rd.keyed<long long>("nodes");
    LOOM_USER_CHECK(count >= 1 && count < (1LL << 30), "loom.cost.E963")
        << "Gbdt::load: tree " << t << " has " << count << " nodes; a tree has at least one";
    // No reserve(count): a corrupt count must fail on the missing nodes, not allocate them.
    const int32_t base = static_cast<int32_t>(m.nodes_.size());
    LOOM_USER_CHECK(static_cast<long long>(base) + count < (1LL << 31), "loom.cost.E963")
        << "Gbdt::load: the model has more than 2^31 nodes";
    std::vector<int32_t> depth(static_cast<size_t>(count), 0);
    int32_t tree_depth = 0;
    for (int32_t k = 0; k < count; ++k) {
      const std::string kind = rd.word("'split' or 'leaf'");
      if (kind == "leaf") {
        const float v = rd.number<float>("a leaf value");
        LOOM_USER_CHECK(std::isfinite(v), "loom.cost.E963")
            << "Gbdt::load: tree " << t << " node " << k << " has the leaf value " << v;
        m.nodes_.push_back(Node{0, std::numeric_limits<float>::infinity(), base + k, base + k});
        m.leaf_values_.push_back(v);
        continue;
      }
      LOOM_USER_CHECK(kind == "split", "loom.cost.E962")
          << "Gbdt::load: the model file is malformed: expected 'split' or 'leaf' in tree " << t
          << " but found '" << kind << "'";
      const int32_t f = rd.number<int32_t>("a split feature");
      const float thr = rd.number<float>("a split threshold");
      const int32_t l = rd.number<int32_t>("a left child");
      const int32_t r = rd.number<int32_t>("a right child");
      // Children after their parent: every descent moves forward and ends on a leaf.
      LOOM_USER_CHECK(f >= 0 && f < m.num_features_ && !std::isnan(thr) && l > k && l < count &&
                          r > k && r < count,
                      "loom.cost.E963")
          << "Gbdt::load: tree " << t << " node " << k << " (split on feature " << f
          << ", children " << l << " and " << r << ") is not well formed: the feature must be "
          << "below " << m.num_features_ << " and the children after the node, within the " << count
          << " nodes of the tree";
      depth[l] = std::max(depth[l], depth[k] + 1);
      depth[r] = std::max(depth[r], depth[k] + 1);
      tree_depth = std::max(tree_depth, depth[k] + 1);
      m.nodes_.push_back(Node{f, thr, base + l, base + r});
      m.leaf_values_.push_back(0.0f);
    }
    m.tree_roots_.push_back(base);
    m.tree_depths_.push_back(tree_depth);
  }
  rd.expect("end");
  return m;
}

}  // namespace cost
LOOM_END_NAMESPACE
