// The embedded GBDT (loom/cost/gbdt.hpp) and the cost models over it (loom/cost/model.hpp):
// accuracy on known functions, the pack-sum objective, determinism, the text format and its
// errors, early stopping, sampling, input errors, and the ranking metrics on hand examples.
#include <doctest/doctest.h>

#include <loom/cost/gbdt.hpp>
#include <loom/cost/model.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace loom;
using namespace loom::cost;

namespace {

double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// y = x0² + 3·[x1 > 0.5] over `n` rows of 5 uniform features (three of them noise).
GbdtDataset nonlinear(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GbdtDataset d;
  d.num_features = 5;
  for (size_t i = 0; i < n; ++i) {
    float x[5];
    for (float& v : x) v = static_cast<float>(uniform(rng));
    d.features.insert(d.features.end(), x, x + 5);
    d.labels.push_back(double(x[0]) * x[0] + (x[1] > 0.5f ? 3.0 : 0.0));
  }
  return d;
}

/// Groups of 1–4 rows of 4 features; a group's label is the sum over its rows of
/// f(x) = 2·x0 + [x1 > 0.3] (x2, x3 noise, x3 exactly 0 in most rows).
double row_function(const float* x) { return 2.0 * x[0] + (x[1] > 0.3f ? 1.0 : 0.0); }

GbdtDataset packed(size_t groups, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GbdtDataset d;
  d.num_features = 4;
  d.group_offsets = {0};
  for (size_t g = 0; g < groups; ++g) {
    const size_t rows = 1 + rng() % 4;
    double y = 0;
    for (size_t r = 0; r < rows; ++r) {
      float x[4] = {static_cast<float>(uniform(rng)), static_cast<float>(uniform(rng)),
                    static_cast<float>(uniform(rng)),
                    rng() % 4 == 0 ? static_cast<float>(uniform(rng)) : 0.0f};
      d.features.insert(d.features.end(), x, x + 4);
      y += row_function(x);
    }
    d.group_offsets.push_back(d.group_offsets.back() + rows);
    d.labels.push_back(y);
  }
  return d;
}

double rmse(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

std::vector<double> predict_groups(const Gbdt& m, const GbdtDataset& d) {
  std::vector<size_t> off = d.group_offsets;
  if (off.empty())
    for (size_t g = 0; g <= d.num_groups(); ++g) off.push_back(g);
  std::vector<double> out(d.num_groups());
  m.predict_groups(d.features.data(), off.data(), d.num_groups(), out.data());
  return out;
}

/// The `q` quantile of |a − b|.
double quantile_abs_error(const std::vector<double>& a, const std::vector<double>& b, double q) {
  std::vector<double> e;
  for (size_t i = 0; i < a.size(); ++i) e.push_back(std::fabs(a[i] - b[i]));
  std::sort(e.begin(), e.end());
  return e[static_cast<size_t>(q * static_cast<double>(e.size() - 1))];
}

/// The message of the loom::user_error `fn` throws ("" when it throws none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const user_error& e) {
    return e.what();
  }
  return "";
}

/// The `[loom.cost.E9xx]` id at the start of the error `fn` throws.
std::string error_id(const std::function<void()>& fn) {
  const std::string msg = error_of(fn);
  return msg.substr(0, msg.find(']') + 1);
}

std::string saved(const Gbdt& m) {
  std::ostringstream out;
  m.save(out);
  return out.str();
}

Gbdt load_text(const std::string& text) {
  std::istringstream in(text);
  return Gbdt::load(in);
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Programs of 1–3 rows of 6 features whose throughput is a sum over statements, the shape
/// pack-sum assumes: y = Σ_rows s(x) / 3 with s(x) = 0.1 + 0.5·x0·[x1 > 0.5] + 0.3·x2², in [0, 1].
void make_programs(size_t n, uint64_t seed, std::vector<ProgramFeatures>& programs,
                   std::vector<double>& throughputs) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    ProgramFeatures p;
    p.num_features = 6;
    p.num_rows = static_cast<int>(1 + rng() % 3);
    double y = 0;
    for (int r = 0; r < p.num_rows; ++r) {
      for (int f = 0; f < 6; ++f) p.values.push_back(static_cast<float>(uniform(rng)));
      const float* x = &p.values[static_cast<size_t>(r) * 6];
      y += 0.1 + 0.5 * x[0] * (x[1] > 0.5f ? 1 : 0) + 0.3 * x[2] * x[2];
    }
    programs.push_back(std::move(p));
    throughputs.push_back(y / 3);
  }
}

GbdtParams quick_params() {
  GbdtParams p;
  p.max_depth = 6;
  p.max_rounds = 150;
  p.min_child_weight = 1;
  return p;
}

}  // namespace

TEST_SUITE("cost") {
  TEST_CASE("a nonlinear function is learned to a low held-out error") {
    const GbdtDataset train = nonlinear(3000, 1), test = nonlinear(1000, 2);
    const Gbdt m = Gbdt::train(train, quick_params());
    REQUIRE(m.num_trees() > 0);
    CHECK(m.num_features() == 5);
    const std::vector<double> pred = predict_groups(m, test);
    const double err = rmse(pred, test.labels);
    const double p95 = quantile_abs_error(pred, test.labels, 0.95);
    MESSAGE("held-out RMSE " << err << ", 95th percentile error " << p95 << ", " << m.num_trees()
                             << " trees");
    // The labels spread over [0, 4] with a standard deviation near 1.5. Most of the RMSE comes
    // from the few points between x1 = 0.5 and the nearest bin edge (a bin is 1/64 wide), which
    // are off by 3.
    CHECK(err < 0.15);
    CHECK(p95 < 0.03);
    // The step at x1 = 0.5 is found to within a bin: points either side differ by about 3.
    std::vector<float> probe = {0.2f, 0.47f, 0.5f, 0.5f, 0.5f, 0.2f, 0.53f, 0.5f, 0.5f, 0.5f};
    const std::vector<float> p = m.predict_rows(probe);
    CHECK(p[1] - p[0] == doctest::Approx(3.0).epsilon(0.05));
  }

  TEST_CASE("pack-sum: group sums and the per-row function are both learned") {
    const GbdtDataset train = packed(2000, 3), test = packed(500, 4);
    GbdtParams params = quick_params();
    params.max_depth = 4;  // deeper trees overfit the split of a group's residual among its rows
    const Gbdt m = Gbdt::train(train, params);
    const std::vector<double> pred = predict_groups(m, test);
    const double err = rmse(pred, test.labels);
    MESSAGE("held-out group-sum RMSE " << err);
    CHECK(err < 0.15);  // group labels spread over [0, 12]; the step at 0.3 costs most of it
    CHECK(quantile_abs_error(pred, test.labels, 0.9) < 0.1);
    // Group sizes vary, so the per-row function itself is identifiable.
    std::vector<double> row_pred, row_true;
    const std::vector<float> p = m.predict_rows(test.features);
    for (size_t r = 0; r < p.size(); ++r) {
      row_pred.push_back(p[r]);
      row_true.push_back(row_function(&test.features[r * 4]));
    }
    CHECK(rmse(row_pred, row_true) < 0.1);
    CHECK(quantile_abs_error(row_pred, row_true, 0.9) < 0.06);
    // One label per group cannot be passed as one label per row.
    GbdtDataset no_groups = train;
    no_groups.group_offsets.clear();
    CHECK(error_id([&] { (void)Gbdt::train(no_groups, quick_params()); }) == "[loom.cost.E952]");
  }

  TEST_CASE("weights: groups of weight 0 do not change the trees") {
    // Features on a 1/32 grid, so that the bin edges (every midpoint) do not depend on how
    // often a value occurs; then duplicates of weight 0 with absurd labels change nothing.
    GbdtDataset d = nonlinear(500, 5);
    for (float& v : d.features) v = std::round(v * 32) / 32;
    d.weights.assign(d.num_groups(), 1.0);
    GbdtDataset poisoned = d;
    for (size_t g = 0; g < 50; ++g) {
      poisoned.features.insert(poisoned.features.end(), d.features.begin() + g * 5,
                               d.features.begin() + g * 5 + 5);
      poisoned.labels.push_back(1000.0);
      poisoned.weights.push_back(0.0);
    }
    GbdtParams p = quick_params();
    p.max_rounds = 40;
    p.early_stopping_rounds = 0;  // the (unweighted) RMSE would see the absurd labels
    const Gbdt a = Gbdt::train(d, p), b = Gbdt::train(poisoned, p);
    CHECK(a.num_trees() == 40);
    CHECK(saved(a) == saved(b));
    // Weight 2 on every group is weight 1 with half the regularisation: a different model.
    GbdtDataset doubled = d;
    doubled.weights.assign(d.num_groups(), 2.0);
    CHECK(saved(Gbdt::train(doubled, p)) != saved(a));
  }

  TEST_CASE("training is deterministic for a seed, with sampling and with threads") {
    const GbdtDataset d = packed(1500, 6);
    GbdtParams p = quick_params();
    p.colsample = 0.75;
    p.subsample = 0.8;
    p.max_rounds = 60;
    const Gbdt a = Gbdt::train(d, p), b = Gbdt::train(d, p);
    CHECK(bit_identical(a.predict_rows(d.features), b.predict_rows(d.features)));
    CHECK(saved(a) == saved(b));
    p.num_threads = 2;
    const Gbdt c = Gbdt::train(d, p);
    CHECK(bit_identical(a.predict_rows(d.features), c.predict_rows(d.features)));
    p.seed = 7;
    const Gbdt other = Gbdt::train(d, p);
    CHECK(!bit_identical(a.predict_rows(d.features), other.predict_rows(d.features)));
  }

  TEST_CASE("threads: histograms and prediction split over two threads give the same model") {
    // Wide enough that the root histogram (rows × features) takes the threaded path.
    std::mt19937_64 rng(8);
    GbdtDataset d;
    d.num_features = 64;
    for (int i = 0; i < 2500; ++i) {
      double y = 0;
      for (int f = 0; f < 64; ++f) {
        const float v = rng() % 3 == 0 ? 0.0f : static_cast<float>(uniform(rng));
        d.features.push_back(v);
        if (f < 3) y += v * (f + 1);
      }
      d.labels.push_back(y);
    }
    GbdtParams p = quick_params();
    p.max_rounds = 20;
    for (double colsample : {1.0, 0.5}) {
      p.colsample = colsample;
      p.num_threads = 1;
      const Gbdt one = Gbdt::train(d, p);
      p.num_threads = 2;
      const Gbdt two = Gbdt::train(d, p);
      REQUIRE(one.num_trees() == 20);
      CHECK(saved(one).substr(saved(one).find("num_features")) ==
            saved(two).substr(saved(two).find("num_features")));
      CHECK(bit_identical(one.predict_rows(d.features), two.predict_rows(d.features)));
    }
  }

  TEST_CASE("save and load round-trip exactly") {
    const GbdtDataset d = packed(800, 9);
    GbdtParams p = quick_params();
    p.max_rounds = 40;
    p.learning_rate = 0.1;
    p.seed = 12345678901234567ULL;
    const Gbdt m = Gbdt::train(d, p);
    const std::string text = saved(m);
    CHECK(text.rfind("loom-gbdt 1\n", 0) == 0);
    const Gbdt back = load_text(text);
    CHECK(back.num_trees() == m.num_trees());
    CHECK(back.num_features() == m.num_features());
    CHECK(back.params().seed == p.seed);
    CHECK(back.params().learning_rate == p.learning_rate);
    CHECK(back.tree_depths() == m.tree_depths());
    CHECK(bit_identical(back.predict_rows(d.features), m.predict_rows(d.features)));
    CHECK(saved(back) == text);
    // Features never seen in training (NaN, infinities) also land in the same leaves.
    std::vector<float> odd = {std::numeric_limits<float>::quiet_NaN(), 0.5f, -1e30f, 1e30f,
                              std::numeric_limits<float>::infinity(),  0.0f, 0.0f,   0.0f};
    CHECK(bit_identical(back.predict_rows(odd), m.predict_rows(odd)));
    // An empty model round-trips too and predicts 0.
    const Gbdt empty = load_text(saved(Gbdt{}));
    CHECK(empty.num_trees() == 0);
    CHECK(empty.predict_rows(std::vector<float>{}).empty());
  }

  TEST_CASE("broken or foreign model files are rejected with their ids") {
    const GbdtDataset d = nonlinear(300, 10);
    GbdtParams p = quick_params();
    p.max_rounds = 5;
    const std::string text = saved(Gbdt::train(d, p));
    CHECK_THROWS_WITH_AS(load_text("xgboost 1\n"),
                         "[loom.cost.E960] Gbdt::load: the stream does not hold a loom-gbdt "
                         "model (it starts with 'xgboost'); pass a file written by Gbdt::save",
                         user_error);
    CHECK(error_id([] { (void)load_text(""); }) == "[loom.cost.E960]");
    std::string v2 = text;
    v2[std::string("loom-gbdt ").size()] = '2';
    CHECK_THROWS_WITH_AS(load_text(v2),
                         "[loom.cost.E961] Gbdt::load: the model is in loom-gbdt format version 2 "
                         "but this loom reads version 1; write it again with this loom's "
                         "Gbdt::save",
                         user_error);
    // Cut anywhere, the file is reported truncated.
    for (size_t cut : {size_t{15}, text.size() / 3, text.size() / 2, text.size() - 5})
      CHECK(error_id([&] { (void)load_text(text.substr(0, cut)); }) == "[loom.cost.E962]");
    std::string garbled = text;
    garbled[garbled.find("base_score ") + 11] = 'x';
    CHECK(error_id([&] { (void)load_text(garbled); }) == "[loom.cost.E962]");
    // A child pointing backwards would loop: not well formed.
    const std::string bad_tree =
        "loom-gbdt 1\nparams max_depth 2 learning_rate 0.2 min_child_weight 0 lambda 1 gamma 0 "
        "colsample 1 subsample 1 max_rounds 1 early_stopping_rounds 0 validation_fraction 0 "
        "max_bins 64 seed 1 num_threads 1\nnum_features 2\nbase_score 0\ntrees 1\n"
        "tree 0 nodes 3\nsplit 1 0.5 0 2\nleaf 1\nleaf 2\nend\n";
    CHECK(error_id([&] { (void)load_text(bad_tree); }) == "[loom.cost.E963]");
    std::string fixed = bad_tree;
    fixed[fixed.find("split 1 0.5 0 2") + 12] = '1';
    const Gbdt ok = load_text(fixed);
    CHECK(ok.predict_rows(std::vector<float>{0.0f, 0.25f})[0] == 1.0f);
    CHECK(ok.predict_rows(std::vector<float>{0.0f, 0.75f})[0] == 2.0f);
    std::string bad_feature = fixed;
    bad_feature[bad_feature.find("split 1") + 6] = '2';
    CHECK(error_id([&] { (void)load_text(bad_feature); }) == "[loom.cost.E963]");
  }

  TEST_CASE("early stopping stops on noise and keeps the best trees") {
    std::mt19937_64 rng(11);
    GbdtDataset d;
    d.num_features = 6;
    for (int i = 0; i < 1500; ++i) {
      for (int f = 0; f < 6; ++f) d.features.push_back(static_cast<float>(uniform(rng)));
      d.labels.push_back(uniform(rng));
    }
    GbdtParams p;
    p.max_rounds = 1000;
    p.early_stopping_rounds = 10;
    p.validation_fraction = 0.3;
    const Gbdt m = Gbdt::train(d, p);
    const GbdtTrainInfo& info = m.train_info();
    CHECK(info.on_validation);
    CHECK(info.stopped_early);
    CHECK(info.rounds_trained < 100);
    CHECK(info.rounds_trained == info.best_rounds + 10);
    CHECK(m.num_trees() == info.best_rounds);
    CHECK(info.rmse_history.size() == static_cast<size_t>(info.rounds_trained) + 1);
    CHECK(info.best_rmse == *std::min_element(info.rmse_history.begin(), info.rmse_history.end()));
    // Without early stopping every round is kept.
    p.early_stopping_rounds = 0;
    p.max_rounds = 25;
    const Gbdt all = Gbdt::train(d, p);
    CHECK(all.num_trees() == 25);
    CHECK_FALSE(all.train_info().stopped_early);
  }

  TEST_CASE("on the training loss (Ansor) early stopping ends once the fit stops improving") {
    const GbdtDataset d = nonlinear(400, 12);
    GbdtParams p;  // Ansor's parameters
    p.max_rounds = 3000;
    const Gbdt m = Gbdt::train(d, p);
    CHECK_FALSE(m.train_info().on_validation);
    CHECK(m.train_info().stopped_early);
    CHECK(m.train_info().best_rmse < 0.03);
    CHECK(m.num_trees() == m.train_info().rounds_trained - 50);
  }

  TEST_CASE("column and row subsampling") {
    const GbdtDataset d = nonlinear(2000, 13), test = nonlinear(500, 14);
    GbdtParams p = quick_params();
    SUBCASE("colsample 0.2 of 5 features lets each tree split on one feature") {
      p.colsample = 0.2;
      p.max_rounds = 100;
      p.early_stopping_rounds = 0;
      const Gbdt m = Gbdt::train(d, p);
      std::set<int> used_overall;
      for (int t = 0; t < m.num_trees(); ++t) {
        const int32_t end =
            t + 1 < m.num_trees() ? m.tree_roots()[t + 1] : static_cast<int32_t>(m.nodes().size());
        std::set<int> used;
        for (int32_t k = m.tree_roots()[t]; k < end; ++k)
          if (m.nodes()[k].left != k) used.insert(m.nodes()[k].feature);
        CHECK(used.size() <= 1);
        used_overall.insert(used.begin(), used.end());
      }
      CHECK(used_overall.count(0) == 1);
      CHECK(used_overall.count(1) == 1);
      CHECK(rmse(predict_groups(m, test), test.labels) < 0.25);
    }
    SUBCASE("subsample 0.5 still fits, and differs from the full model") {
      p.subsample = 0.5;
      const Gbdt m = Gbdt::train(d, p);
      const Gbdt full = Gbdt::train(d, quick_params());
      const std::vector<double> pred = predict_groups(m, test);
      CHECK(rmse(pred, test.labels) < 0.25);
      CHECK(quantile_abs_error(pred, test.labels, 0.95) < 0.05);
      CHECK(!bit_identical(m.predict_rows(test.features), full.predict_rows(test.features)));
    }
  }

  TEST_CASE("ties and constant features: a mostly-zero feature keeps its values apart") {
    // 80% of x1 are exactly 0; the rest take 40 distinct values; x0 is constant.
    std::mt19937_64 rng(15);
    GbdtDataset d;
    d.num_features = 2;
    for (int i = 0; i < 2000; ++i) {
      const float v = rng() % 5 == 0 ? static_cast<float>(1 + rng() % 40) : 0.0f;
      d.features.insert(d.features.end(), {3.0f, v});
      d.labels.push_back(std::log2(1.0 + v));
    }
    GbdtParams p = quick_params();
    p.max_bins = 16;
    const Gbdt m = Gbdt::train(d, p);
    for (const Gbdt::Node& n : m.nodes())
      if (n.left != &n - m.nodes().data()) CHECK(n.feature == 1);
    // Zero has a bin of its own: it is predicted exactly apart from the smallest nonzero value.
    const std::vector<float> p0 = m.predict_rows(std::vector<float>{3.0f, 0.0f, 3.0f, 1.0f});
    CHECK(p0[0] == doctest::Approx(0.0).epsilon(0.01));
    CHECK(p0[1] > 0.5f);
    const std::vector<float> edges = cost::detail::quantile_edges(
        [] {
          std::vector<float> v(700, 0.0f);
          for (int i = 1; i <= 300; ++i) v.push_back(static_cast<float>(i));
          return v;
        }(),
        16);
    CHECK(edges.size() <= 15);
    CHECK(edges.size() >= 14);
    CHECK(edges[0] == 0.5f);  // zero alone, then the 300 others spread over the other bins
    CHECK(std::is_sorted(edges.begin(), edges.end()));
    CHECK(cost::detail::quantile_edges(std::vector<float>(10, 2.0f), 16).empty());
    CHECK(cost::detail::quantile_edges({1.0f, 2.0f, 2.0f, 7.0f}, 16) ==
          std::vector<float>{1.5f, 4.5f});
  }

  TEST_CASE("bad input is reported with what to do") {
    GbdtDataset d = nonlinear(10, 16);
    SUBCASE("matrix shape") {
      d.features.pop_back();
      CHECK_THROWS_WITH_AS((void)Gbdt::train(d),
                           "[loom.cost.E950] GbdtDataset has 49 feature values, not a multiple "
                           "of 5 features per row; pass a rows × num_features row-major matrix",
                           user_error);
      d.num_features = 0;
      CHECK(error_id([&] { (void)Gbdt::train(d); }) == "[loom.cost.E950]");
    }
    SUBCASE("group offsets") {
      d.group_offsets = {0, 4, 3, 10};
      d.labels.resize(3);
      CHECK_THROWS_WITH_AS((void)Gbdt::train(d),
                           "[loom.cost.E951] GbdtDataset group offsets decrease at group 1 (4 "
                           "then 3); the rows of a group must be contiguous and the offsets "
                           "non-decreasing",
                           user_error);
      d.group_offsets = {0, 4, 9};
      d.labels.resize(2);
      CHECK(error_id([&] { (void)Gbdt::train(d); }) == "[loom.cost.E951]");
    }
    SUBCASE("label and weight counts") {
      d.weights.assign(3, 1.0);
      CHECK(error_id([&] { (void)Gbdt::train(d); }) == "[loom.cost.E952]");
    }
    SUBCASE("NaN labels and negative weights") {
      d.labels[3] = std::nan("");
      CHECK_THROWS_WITH_AS((void)Gbdt::train(d),
                           "[loom.cost.E953] GbdtDataset label 3 is nan; labels must be finite",
                           user_error);
      d.labels[3] = 1.0;
      d.weights.assign(10, 1.0);
      d.weights[2] = -1.0;
      CHECK(error_id([&] { (void)Gbdt::train(d); }) == "[loom.cost.E953]");
    }
    SUBCASE("parameters") {
      GbdtParams p;
      p.max_bins = 300;
      CHECK_THROWS_WITH_AS((void)Gbdt::train(d, p),
                           "[loom.cost.E954] GbdtParams::max_bins = 300 is out of range; it must "
                           "be in [2, 256]",
                           user_error);
      p = {};
      p.subsample = 0;
      CHECK(error_id([&] { (void)Gbdt::train(d, p); }) == "[loom.cost.E954]");
      p = {};
      p.learning_rate = std::nan("");
      CHECK(error_id([&] { (void)Gbdt::train(d, p); }) == "[loom.cost.E954]");
    }
    SUBCASE("no data") {
      GbdtDataset empty;
      empty.num_features = 3;
      CHECK(error_id([&] { (void)Gbdt::train(empty); }) == "[loom.cost.E955]");
    }
    SUBCASE("prediction shapes") {
      const Gbdt m = Gbdt::train(d, quick_params());
      CHECK(error_id([&] { (void)m.predict_rows(std::vector<float>(7)); }) == "[loom.cost.E956]");
      const std::vector<size_t> off = {0, 3, 2};
      double out[2];
      CHECK(error_id([&] { m.predict_groups(d.features.data(), off.data(), 2, out); }) ==
            "[loom.cost.E951]");
    }
  }

  TEST_CASE("ranking metrics on hand examples") {
    const std::vector<double> labels = {0.1, 0.4, 0.2, 0.9, 0.4};
    // Perfect order, reversed order, and a score tie.
    CHECK(pairwise_accuracy({1, 4, 2, 9, 5}, labels) == 1.0);  // the 0.4 tie is not a pair
    CHECK(pairwise_accuracy({9, 4, 8, 1, 5}, labels) == 0.0);
    // 9 pairs with different labels; (0.1, 0.2) is tied in score: 8.5 / 9.
    CHECK(pairwise_accuracy({1, 4, 1, 9, 5}, labels) == doctest::Approx(8.5 / 9));
    // 0.4 at position 1 scored below 0.2 at position 2: one pair wrong out of nine.
    CHECK(pairwise_accuracy({1, 2, 4, 9, 5}, labels) == doctest::Approx(8.0 / 9));
    CHECK(std::isnan(pairwise_accuracy({1, 2}, {3, 3})));

    // Top-2 by label: positions 3 and 1 (0.4 at position 1 wins the tie with position 4).
    CHECK(recall_at_k({0, 0, 0, 5, 4}, labels, 2) == 0.5);
    CHECK(recall_at_k({0, 4, 0, 5, 0}, labels, 2) == 1.0);
    CHECK(recall_at_k({0, 4, 0, 5, 0}, labels, 1) == 1.0);
    CHECK(recall_at_k({5, 4, 3, 2, 1}, labels, 1) == 0.0);
    CHECK(recall_at_k({5, 4, 3, 2, 1}, labels, 100) == 1.0);
    CHECK(std::isnan(recall_at_k({}, {}, 3)));

    // a-peak: picks 0.1, 0.4, then 0.9 -> (0.1 + 0.4 + 0.9) / 0.9 / 3.
    CHECK(average_peak_score({5, 4, 1, 3, 0}, labels, 3) == doctest::Approx(1.4 / 0.9 / 3));
    CHECK(average_peak_score({0, 0, 0, 1, 0}, labels, 32) == 1.0);

    CHECK_THROWS_WITH_AS(pairwise_accuracy({1, 2}, {1}),
                         "[loom.cost.E957] pairwise_accuracy got 2 scores but 1 labels; pass one "
                         "of each per program",
                         user_error);
  }

  TEST_CASE("pairwise accuracy matches the quadratic definition on random data") {
    std::mt19937_64 rng(17);
    std::vector<double> s(300), l(300);
    for (size_t i = 0; i < s.size(); ++i) {
      s[i] = static_cast<double>(rng() % 20);  // many ties
      l[i] = static_cast<double>(rng() % 15);
    }
    double right = 0, pairs = 0;
    for (size_t i = 0; i < s.size(); ++i)
      for (size_t j = 0; j < s.size(); ++j)
        if (l[i] < l[j]) {
          pairs += 1;
          right += s[i] < s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
        }
    CHECK(pairwise_accuracy(s, l) == doctest::Approx(right / pairs).epsilon(1e-12));
  }
}

TEST_SUITE("cost") {
  TEST_CASE("GbdtCostModel: random while warming up, then a model that ranks well") {
    std::vector<ProgramFeatures> train, test;
    std::vector<double> y_train, y_test;
    make_programs(600, 20, train, y_train);
    make_programs(300, 21, test, y_test);
    GbdtCostModelOptions o;
    o.warmup_samples = 100;
    o.params.max_rounds = 200;
    GbdtCostModel model(o);
    CHECK(model.name() == "gbdt");
    // 50 samples: still warming up, scores are uniform random.
    model.update({train.begin(), train.begin() + 50}, {y_train.begin(), y_train.begin() + 50});
    CHECK_FALSE(model.trained());
    const std::vector<double> warm = model.predict(test);
    CHECK(std::all_of(warm.begin(), warm.end(), [](double s) { return s >= 0 && s < 1; }));
    CHECK(error_id([&] {
            std::ostringstream out;
            model.save(out);
          }) == "[loom.cost.E964]");
    model.update({train.begin() + 50, train.end()}, {y_train.begin() + 50, y_train.end()});
    CHECK(model.trained());
    CHECK(model.num_samples() == 600);
    const std::vector<double> scores = model.predict(test);
    const double acc = pairwise_accuracy(scores, y_test);
    MESSAGE("pairwise accuracy " << acc << ", recall@30 " << recall_at_k(scores, y_test, 30)
                                 << ", a-peak@32 " << average_peak_score(scores, y_test, 32));
    CHECK(acc > 0.85);
    CHECK(rmse(scores, y_test) < 0.05);
    CHECK(average_peak_score(scores, y_test, 32) > 0.9);

    // Save and load: same predictions, and warm-up is over for the loaded model.
    std::stringstream file;
    model.save(file);
    GbdtCostModel loaded(o);
    loaded.load(file);
    CHECK(loaded.trained());
    CHECK(loaded.predict(test) == scores);
    // Rows of a later feature layout (3 more features at the end) are read by their prefix.
    auto widen = [](std::vector<ProgramFeatures> programs) {
      for (ProgramFeatures& p : programs) {
        std::vector<float> wide;
        for (int r = 0; r < p.num_rows; ++r) {
          const auto row = p.values.begin() + static_cast<ptrdiff_t>(r) * p.num_features;
          wide.insert(wide.end(), row, row + p.num_features);
          wide.insert(wide.end(), {7.0f, -1.0f, 0.5f});
        }
        p.num_features += 3;
        p.values = std::move(wide);
      }
      return programs;
    };
    const std::vector<ProgramFeatures> wide_test = widen(test);
    CHECK(loaded.predict(wide_test) == scores);
    // A loaded model learns the layout of the samples it is given next.
    GbdtCostModel relearning(o);
    std::stringstream again(file.str());
    relearning.load(again);
    const std::vector<ProgramFeatures> wide_train = widen(train);
    relearning.update(wide_train, y_train);
    CHECK(relearning.model().num_features() == 9);
    CHECK(error_id([&] { (void)relearning.predict(test); }) == "[loom.cost.E967]");
    CHECK(pairwise_accuracy(relearning.predict(wide_test), y_test) > 0.85);
    // Told to learn from the first 6 features, a model of 9-feature rows is the 6-feature one.
    GbdtCostModelOptions prefix = o;
    prefix.num_features = 6;
    GbdtCostModel ablated(prefix);
    ablated.update(wide_train, y_train);
    CHECK(ablated.model().num_features() == 6);
    CHECK(ablated.predict(wide_test) == scores);
    ablated.update(test, y_test);  // rows of just those 6 are the same samples
    CHECK(ablated.num_samples() == train.size() + test.size());
    loaded.update({train.begin(), train.begin() + 5}, {y_train.begin(), y_train.begin() + 5});
    CHECK(loaded.num_samples() == 5);

    // A program without rows scores -inf; fewer features than the model's are refused.
    std::vector<ProgramFeatures> odd(2);
    odd[1].num_rows = 1;
    odd[1].num_features = 4;
    odd[1].values.assign(4, 0.0f);
    CHECK(error_id([&] { (void)model.predict(odd); }) == "[loom.cost.E967]");
    odd.pop_back();
    CHECK(model.predict(odd)[0] == -std::numeric_limits<double>::infinity());
    CHECK(error_id([&] { model.update(odd, {0.5, 0.5}); }) == "[loom.cost.E966]");
    CHECK(error_id([&] { model.update(odd, {-0.5}); }) == "[loom.cost.E966]");
    ProgramFeatures broken;
    broken.num_rows = 2;
    broken.num_features = 6;
    broken.values.assign(11, 0.0f);
    CHECK_THROWS_WITH_AS(model.update({broken}, {0.5}),
                         "[loom.cost.E965] GbdtCostModel::update: program 0 has 11 feature values "
                         "for 2 rows of 6 features; values must hold num_rows × num_features "
                         "floats, row-major",
                         user_error);
    std::istringstream wrong("loom-cost-model random 1\nseed 3\n");
    CHECK(error_id([&] { model.load(wrong); }) == "[loom.cost.E968]");
  }

  TEST_CASE("RandomCostModel: seeded uniform scores") {
    std::vector<ProgramFeatures> programs(5);
    RandomCostModel a(5), b(5), c(6);
    const std::vector<double> sa = a.predict(programs);
    CHECK(sa == b.predict(programs));
    CHECK(sa != c.predict(programs));
    CHECK(std::all_of(sa.begin(), sa.end(), [](double s) { return s >= 0 && s < 1; }));
    std::stringstream file;
    a.save(file);
    c.load(file);
    RandomCostModel fresh(5);
    CHECK(c.predict(programs) == fresh.predict(programs));
    CHECK(a.name() == "random");
  }

  TEST_CASE("AnalyticCostModel: a roofline over FLOP and byte columns") {
    // Columns: 0 unused, 1 and 2 FLOPs (adds, muls), 3 bytes, log-scaled as log2(1 + x).
    auto slog = [](double x) { return static_cast<float>(std::log2(1.0 + x)); };
    auto program = [&](std::vector<std::pair<double, double>> rows) {
      ProgramFeatures p;
      p.num_features = 4;
      for (auto [flops, bytes] : rows) {
        p.values.insert(p.values.end(), {7.0f, slog(flops / 2), slog(flops / 2), slog(bytes)});
        ++p.num_rows;
      }
      return p;
    };
    AnalyticCostModel roof = AnalyticCostModel::roofline({1, 2}, {3}, /*flops_per_byte=*/4.0);
    CHECK(roof.name() == "roofline");
    CHECK(roof.feature_indices() == std::vector<int>{1, 2, 3});
    // Costs: max(1000, 4·100) + 1 = 1001; max(100, 4·1000) + 1 = 4001; two rows: 1001 + 4001.
    const std::vector<double> s =
        roof.predict({program({{1000, 100}}), program({{100, 1000}}),
                      program({{1000, 100}, {100, 1000}}), ProgramFeatures{}});
    CHECK(s[0] == doctest::Approx(1.0 / 1001).epsilon(1e-5));
    CHECK(s[1] == doctest::Approx(1.0 / 4001).epsilon(1e-5));
    CHECK(s[2] == doctest::Approx(1.0 / 5002).epsilon(1e-5));
    CHECK(s[3] == -std::numeric_limits<double>::infinity());
    // A custom formula over one column.
    AnalyticCostModel custom({0}, [](std::span<const float> v) { return double(v[0]); }, "c0");
    CHECK(custom.name() == "c0");
    CHECK(custom.predict({program({{1, 1}})})[0] == doctest::Approx(1.0 / 7));
    CHECK_THROWS_WITH_AS(
        AnalyticCostModel(
            {5}, [](std::span<const float>) { return 1.0; }, "five")
            .predict({program({{1, 1}})}),
        "[loom.cost.E969] AnalyticCostModel 'five' reads feature 5 but program 0 has only 4 "
        "features per row",
        user_error);
    CHECK(error_id([&] {
            (void)AnalyticCostModel({0}, [](std::span<const float>) {
              return -1.0;
            }).predict({program({{1, 1}})});
          }) == "[loom.cost.E969]");
    CHECK(error_id([] { AnalyticCostModel({-1}, [](std::span<const float>) { return 1.0; }); }) ==
          "[loom.cost.E969]");
    CHECK(error_id([] { (void)AnalyticCostModel::roofline({1}, {2}, 0.0); }) == "[loom.cost.E969]");
    CHECK(error_id([] { (void)AnalyticCostModel::roofline({}, {2}); }) == "[loom.cost.E969]");
    // Save and load check the columns; the formula cannot travel.
    std::stringstream file;
    roof.save(file);
    AnalyticCostModel same = AnalyticCostModel::roofline({1, 2}, {3});
    same.load(file);
    std::stringstream file2;
    roof.save(file2);
    CHECK(error_id([&] { custom.load(file2); }) == "[loom.cost.E968]");
    // Learning is a no-op that still checks its arguments.
    roof.update({program({{1, 1}})}, {0.5});
    CHECK(error_id([&] { roof.update({program({{1, 1}})}, {}); }) == "[loom.cost.E966]");
  }
}
