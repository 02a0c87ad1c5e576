// Bodies of loom/cost/model.hpp: the learned, random and analytic cost models and the ranking
// metrics.
#include "loom/cost/model.hpp"
#include "loom/detail/random.hpp"

#include <algorithm>
#include <cmath>
#include <istream>
#include <limits>
#include <numeric>
#include <ostream>
#include <string>
#include <utility>

LOOM_BEGIN_NAMESPACE
namespace cost {

namespace detail {

inline constexpr double kNoRows = -std::numeric_limits<double>::infinity();

inline void check_programs(const std::vector<ProgramFeatures>& programs, const char* who) {
  for (size_t i = 0; i < programs.size(); ++i) {
    const ProgramFeatures& p = programs[i];
    LOOM_USER_CHECK(p.num_rows >= 0 && p.num_features >= 0 &&
                        p.values.size() ==
                            static_cast<size_t>(p.num_rows) * static_cast<size_t>(p.num_features),
                    "loom.cost.E965")
        << who << ": program " << i << " has " << p.values.size() << " feature values for "
        << p.num_rows << " rows of " << p.num_features
        << " features; values must hold num_rows × num_features floats, row-major";
  }
}

inline void check_throughputs(const std::vector<ProgramFeatures>& programs,
                              const std::vector<double>& throughputs, const char* who) {
  LOOM_USER_CHECK(programs.size() == throughputs.size(), "loom.cost.E966")
      << who << " got " << programs.size() << " programs but " << throughputs.size()
      << " throughputs; pass one throughput per program";
  for (size_t i = 0; i < throughputs.size(); ++i)
    LOOM_USER_CHECK(std::isfinite(throughputs[i]) && throughputs[i] >= 0, "loom.cost.E966")
        << who << ": the throughput of program " << i << " is " << throughputs[i]
        << "; pass the normalized throughput best cost / cost (0 for a failed measurement)";
}

inline void check_sizes(size_t scores, size_t labels, const char* who) {
  LOOM_USER_CHECK(scores == labels, "loom.cost.E957")
      << who << " got " << scores << " scores but " << labels
      << " labels; pass one of each per program";
}

/// Reads `loom-cost-model <kind> 1`.
inline void read_header(std::istream& in, const char* kind, const char* who) {
  std::string magic, got_kind, version;
  in >> magic >> got_kind >> version;
  LOOM_USER_CHECK(magic == "loom-cost-model" && got_kind == kind && version == "1",
                  "loom.cost.E968")
      << who << ": expected a 'loom-cost-model " << kind << " 1' file but it starts with '" << magic
      << ' ' << got_kind << ' ' << version << "'; load a file that this model's save() "
      << "wrote";
}

/// Positions sorted by score, highest first, earlier positions first among equal scores.
inline std::vector<size_t> by_score_desc(const std::vector<double>& scores) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  return order;
}

// Appends the first `nf` features of each row of `p` to `out`: all of a row, or the prefix a
// model of an older (shorter) feature layout reads.
inline void append_rows(std::vector<float>& out, const ProgramFeatures& p, int nf) {
  if (p.num_features == nf) {
    out.insert(out.end(), p.values.begin(), p.values.end());
    return;
  }
  for (int r = 0; r < p.num_rows; ++r) {
    const auto row = p.values.begin() + static_cast<ptrdiff_t>(r) * p.num_features;
    out.insert(out.end(), row, row + nf);
  }
}

}  // namespace detail

// --- GbdtCostModel -------------------------------------------------------------------------------

LOOM_DECL GbdtCostModel::GbdtCostModel(GbdtCostModelOptions options)
    : options_(std::move(options)), rng_(options_.seed) {
  data_.group_offsets = {0};
}

LOOM_DECL void GbdtCostModel::update(const std::vector<ProgramFeatures>& programs,
                                     const std::vector<double>& throughputs) {
  detail::check_programs(programs, "GbdtCostModel::update");
  detail::check_throughputs(programs, throughputs, "GbdtCostModel::update");
  // Check every program before keeping any, so a rejected batch leaves the model unchanged.
  // With no samples yet (a new or a loaded model) the first batch sets the feature count: a
  // loaded model may have learned an older layout, and it is retrained on the new samples only.
  int given = 0;
  for (size_t i = 0; i < programs.size(); ++i) {
    const ProgramFeatures& p = programs[i];
    if (p.num_rows == 0) continue;
    if (given == 0) given = p.num_features;
    LOOM_USER_CHECK(p.num_features == given && given > 0, "loom.cost.E967")
        << "GbdtCostModel::update: program " << i << " has " << p.num_features
        << " features per row but the batch's first has " << given
        << "; extract every program's features with the same feature set";
  }
  if (given == 0) return;  // nothing to learn from
  const int wanted = options_.num_features > 0 ? std::min(options_.num_features, given) : given;
  const int nf = num_samples() > 0 ? data_.num_features : wanted;
  LOOM_USER_CHECK(wanted == nf, "loom.cost.E967")
      << "GbdtCostModel::update: the programs have " << given
      << " features per row but the model learns from " << nf
      << "; extract every program's features with the same feature set";
  data_.num_features = nf;
  for (size_t i = 0; i < programs.size(); ++i) {
    const ProgramFeatures& p = programs[i];
    if (p.num_rows == 0) continue;
    detail::append_rows(data_.features, p, nf);
    data_.group_offsets.push_back(data_.group_offsets.back() + static_cast<size_t>(p.num_rows));
    data_.labels.push_back(throughputs[i]);
    data_.weights.push_back(options_.weight_by_throughput ? throughputs[i] : 1.0);
  }
  // From scratch on everything, as Ansor: boosting on top of the old trees would fit the new
  // samples with trees chosen for the old residuals, and a full retrain stays cheap at the
  // sizes one tuning reaches (tens of thousands of programs).
  if (num_samples() > 0 &&
      (warm_ || num_samples() >= static_cast<size_t>(std::max(options_.warmup_samples, 0)))) {
    model_ = Gbdt::train(data_, options_.params);
    trained_ = true;
  }
}

LOOM_DECL std::vector<double> GbdtCostModel::predict(
    const std::vector<ProgramFeatures>& programs) const {
  detail::check_programs(programs, "GbdtCostModel::predict");
  std::vector<double> out(programs.size(), detail::kNoRows);
  if (!trained_) {
    for (size_t i = 0; i < programs.size(); ++i)
      if (programs[i].num_rows > 0) out[i] = ::loom::detail::unit_draw(rng_);
    return out;
  }
  // One matrix for the whole batch: the blocked predictor wants many rows at once.
  const int nf = model_.num_features();
  std::vector<float> rows;
  std::vector<size_t> offsets{0};
  std::vector<size_t> which;
  for (size_t i = 0; i < programs.size(); ++i) {
    const ProgramFeatures& p = programs[i];
    if (p.num_rows == 0) continue;
    // A feature layout grows only at its end (cost/features.hpp): a model trained on an older
    // one reads the prefix of each row.
    LOOM_USER_CHECK(p.num_features >= nf, "loom.cost.E967")
        << "GbdtCostModel::predict: program " << i << " has " << p.num_features
        << " features per row but the model was trained on " << nf
        << "; extract the features with the feature set the model learned from";
    detail::append_rows(rows, p, nf);
    offsets.push_back(offsets.back() + static_cast<size_t>(p.num_rows));
    which.push_back(i);
  }
  std::vector<double> sums(which.size());
  model_.predict_groups(rows.data(), offsets.data(), which.size(), sums.data());
  for (size_t k = 0; k < which.size(); ++k) out[which[k]] = sums[k];
  return out;
}

LOOM_DECL void GbdtCostModel::save(std::ostream& out) const {
  LOOM_USER_CHECK(trained_, "loom.cost.E964")
      << "GbdtCostModel::save: the model has not been trained yet (" << num_samples() << " of "
      << options_.warmup_samples << " warm-up samples seen); save it after an update that trains";
  out << "loom-cost-model gbdt 1\n";
  model_.save(out);
}

LOOM_DECL void GbdtCostModel::load(std::istream& in) {
  detail::read_header(in, "gbdt", "GbdtCostModel::load");
  model_ = Gbdt::load(in);
  trained_ = true;
  // Ansor disables warm-up after a load: the loaded model already knows more than random.
  warm_ = true;
  data_ = GbdtDataset{};
  data_.group_offsets = {0};
  data_.num_features = model_.num_features();
}

// --- RandomCostModel -----------------------------------------------------------------------------

LOOM_DECL RandomCostModel::RandomCostModel(uint64_t seed) : seed_(seed), rng_(seed) {}

LOOM_DECL void RandomCostModel::update(const std::vector<ProgramFeatures>& programs,
                                       const std::vector<double>& throughputs) {
  detail::check_programs(programs, "RandomCostModel::update");
  detail::check_throughputs(programs, throughputs, "RandomCostModel::update");
}

LOOM_DECL std::vector<double> RandomCostModel::predict(
    const std::vector<ProgramFeatures>& programs) const {
  detail::check_programs(programs, "RandomCostModel::predict");
  std::vector<double> out(programs.size());
  for (double& s : out) s = ::loom::detail::unit_draw(rng_);
  return out;
}

LOOM_DECL void RandomCostModel::save(std::ostream& out) const {
  out << "loom-cost-model random 1\nseed " << seed_ << '\n';
}

LOOM_DECL void RandomCostModel::load(std::istream& in) {
  detail::read_header(in, "random", "RandomCostModel::load");
  std::string key;
  uint64_t seed = 0;
  LOOM_USER_CHECK(static_cast<bool>(in >> key >> seed) && key == "seed", "loom.cost.E968")
      << "RandomCostModel::load: expected 'seed <number>' after the header";
  seed_ = seed;
  rng_.seed(seed);
}

// --- AnalyticCostModel ---------------------------------------------------------------------------

LOOM_DECL AnalyticCostModel::AnalyticCostModel(std::vector<int> feature_indices, RowCost row_cost,
                                               std::string name)
    : indices_(std::move(feature_indices)), row_cost_(std::move(row_cost)), name_(std::move(name)) {
  for (int f : indices_)
    LOOM_USER_CHECK(f >= 0, "loom.cost.E969")
        << "AnalyticCostModel '" << name_ << "': feature index " << f
        << " is negative; pass column indices as named by cost/features.hpp";
  LOOM_USER_CHECK(static_cast<bool>(row_cost_), "loom.cost.E969")
      << "AnalyticCostModel '" << name_ << "' got an empty row_cost function";
}

LOOM_DECL AnalyticCostModel AnalyticCostModel::roofline(const std::vector<int>& flops_features,
                                                        const std::vector<int>& bytes_features,
                                                        double flops_per_byte, bool log_scaled) {
  LOOM_USER_CHECK(std::isfinite(flops_per_byte) && flops_per_byte > 0, "loom.cost.E969")
      << "AnalyticCostModel::roofline: flops_per_byte = " << flops_per_byte
      << "; pass the machine's peak FLOP/s divided by its memory bandwidth (> 0)";
  LOOM_USER_CHECK(!flops_features.empty() && !bytes_features.empty(), "loom.cost.E969")
      << "AnalyticCostModel::roofline got " << flops_features.size() << " FLOP columns and "
      << bytes_features.size() << " byte columns; pass at least one of each";
  std::vector<int> columns = flops_features;
  columns.insert(columns.end(), bytes_features.begin(), bytes_features.end());
  const size_t nflops = flops_features.size();
  auto decode = [log_scaled](float v) {
    const double x = static_cast<double>(v);
    const double raw = log_scaled ? std::copysign(std::exp2(std::fabs(x)) - 1.0, x) : x;
    return std::max(raw, 0.0);
  };
  return AnalyticCostModel(
      std::move(columns),
      [decode, flops_per_byte, nflops](std::span<const float> v) {
        double flops = 0, bytes = 0;
        for (size_t k = 0; k < v.size(); ++k) (k < nflops ? flops : bytes) += decode(v[k]);
        return std::max(flops, flops_per_byte * bytes) + 1.0;
      },
      "roofline");
}

LOOM_DECL void AnalyticCostModel::update(const std::vector<ProgramFeatures>& programs,
                                         const std::vector<double>& throughputs) {
  detail::check_programs(programs, "AnalyticCostModel::update");
  detail::check_throughputs(programs, throughputs, "AnalyticCostModel::update");
}

LOOM_DECL std::vector<double> AnalyticCostModel::predict(
    const std::vector<ProgramFeatures>& programs) const {
  detail::check_programs(programs, "AnalyticCostModel::predict");
  std::vector<double> out(programs.size(), detail::kNoRows);
  std::vector<float> selected(indices_.size());
  for (size_t i = 0; i < programs.size(); ++i) {
    const ProgramFeatures& p = programs[i];
    if (p.num_rows == 0) continue;
    for (int f : indices_)
      LOOM_USER_CHECK(f < p.num_features, "loom.cost.E969")
          << "AnalyticCostModel '" << name_ << "' reads feature " << f << " but program " << i
          << " has only " << p.num_features << " features per row";
    double total = 0;
    for (int r = 0; r < p.num_rows; ++r) {
      const float* row = &p.values[static_cast<size_t>(r) * p.num_features];
      for (size_t k = 0; k < indices_.size(); ++k) selected[k] = row[indices_[k]];
      const double c = row_cost_(std::span<const float>(selected));
      LOOM_USER_CHECK(std::isfinite(c), "loom.cost.E969")
          << "AnalyticCostModel '" << name_ << "': row_cost returned " << c << " for row " << r
          << " of program " << i << "; it must return a finite cost";
      total += c;
    }
    LOOM_USER_CHECK(total > 0, "loom.cost.E969")
        << "AnalyticCostModel '" << name_ << "': the rows of program " << i << " cost " << total
        << " in total; row_cost must make every program's cost positive";
    // A throughput, like the learned models' scores: higher is better.
    out[i] = 1.0 / total;
  }
  return out;
}

LOOM_DECL void AnalyticCostModel::save(std::ostream& out) const {
  out << "loom-cost-model analytic 1\nindices " << indices_.size();
  for (int f : indices_) out << ' ' << f;
  out << '\n';
}

LOOM_DECL void AnalyticCostModel::load(std::istream& in) {
  detail::read_header(in, "analytic", "AnalyticCostModel::load");
  std::string key;
  size_t n = 0;
  std::vector<int> indices;
  bool ok = static_cast<bool>(in >> key >> n) && key == "indices" && n < (size_t{1} << 20);
  for (size_t k = 0; ok && k < n; ++k) {
    int f = 0;
    ok = static_cast<bool>(in >> f);
    indices.push_back(f);
  }
  LOOM_USER_CHECK(ok && indices == indices_, "loom.cost.E968")
      << "AnalyticCostModel::load: the file does not list this model's " << indices_.size()
      << " feature indices; it was written by a different analytic model";
}

// --- metrics -------------------------------------------------------------------------------------

LOOM_DECL double pairwise_accuracy(const std::vector<double>& scores,
                                   const std::vector<double>& labels) {
  detail::check_sizes(scores.size(), labels.size(), "pairwise_accuracy");
  const size_t n = scores.size();
  // Walk the programs by increasing label; a Fenwick tree over score ranks counts, among those
  // with a strictly smaller label, the ones with a smaller and with an equal score.
  std::vector<double> ranks_of(scores);
  std::sort(ranks_of.begin(), ranks_of.end());
  ranks_of.erase(std::unique(ranks_of.begin(), ranks_of.end()), ranks_of.end());
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return labels[a] < labels[b]; });
  std::vector<uint64_t> tree(ranks_of.size() + 1, 0);
  auto below = [&](size_t rank) {  // how many inserted have a rank < `rank`
    uint64_t c = 0;
    for (size_t k = rank; k > 0; k &= k - 1) c += tree[k];
    return c;
  };
  auto rank_of = [&](double s) {
    return static_cast<size_t>(std::lower_bound(ranks_of.begin(), ranks_of.end(), s) -
                               ranks_of.begin());
  };
  double right = 0, pairs = 0;
  uint64_t inserted = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && labels[order[j]] == labels[order[i]]) ++j;
    for (size_t k = i; k < j; ++k) {
      const size_t r = rank_of(scores[order[k]]);
      const uint64_t less = below(r), less_or_equal = below(r + 1);
      right += static_cast<double>(less) + 0.5 * static_cast<double>(less_or_equal - less);
      pairs += static_cast<double>(inserted);
    }
    for (size_t k = i; k < j; ++k) {
      for (size_t t = rank_of(scores[order[k]]) + 1; t < tree.size(); t += t & (~t + 1)) ++tree[t];
      ++inserted;
    }
    i = j;
  }
  return pairs > 0 ? right / pairs : std::numeric_limits<double>::quiet_NaN();
}

LOOM_DECL double recall_at_k(const std::vector<double>& scores, const std::vector<double>& labels,
                             size_t k) {
  detail::check_sizes(scores.size(), labels.size(), "recall_at_k");
  k = std::min(k, scores.size());
  if (k == 0) return std::numeric_limits<double>::quiet_NaN();
  // Both orders break ties by position, so equal scores cannot all claim the top-k.
  const std::vector<size_t> by_score = detail::by_score_desc(scores);
  const std::vector<size_t> by_label = detail::by_score_desc(labels);
  std::vector<char> top(scores.size(), 0);
  for (size_t i = 0; i < k; ++i) top[by_label[i]] = 1;
  size_t hits = 0;
  for (size_t i = 0; i < k; ++i) hits += top[by_score[i]] ? 1 : 0;
  return static_cast<double>(hits) / static_cast<double>(k);
}

LOOM_DECL double average_peak_score(const std::vector<double>& scores,
                                    const std::vector<double>& labels, size_t n) {
  detail::check_sizes(scores.size(), labels.size(), "average_peak_score");
  n = std::min(n, scores.size());
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  const double best = *std::max_element(labels.begin(), labels.end());
  if (!(best > 0)) return std::numeric_limits<double>::quiet_NaN();
  const std::vector<size_t> order = detail::by_score_desc(scores);
  double running = -std::numeric_limits<double>::infinity(), sum = 0;
  for (size_t i = 0; i < n; ++i) {
    running = std::max(running, labels[order[i]]);
    sum += running / best;
  }
  return sum / static_cast<double>(n);
}

}  // namespace cost
LOOM_END_NAMESPACE
