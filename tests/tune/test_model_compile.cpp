// Model-only compilation and the pretrained cost model (loom/cost/pretrained.hpp,
// compile_from_model in loom/tune.hpp): the shipped model loads and predicts as when it was
// trained; compilation is deterministic for a seed and its kernels compute what the interpreter
// does; the spot check catches a wrong kernel; a missing, corrupt or stale model file gives a
// named error or warning and tuned_kernel falls back to the default schedule; tuning can start
// from the pretrained model.
#include <doctest/doctest.h>

#include <loom/cost/features.hpp>
#include <loom/cost/pretrained.hpp>
#include <loom/ops.hpp>
#include <loom/sched/record.hpp>
#include <loom/tune.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "support/op_workloads.hpp"
#include "support/random_schedule.hpp"
#include "support/search_target.hpp"
#include "support/temp_log.hpp"

using namespace loom;
using loom_test::TempLog;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Sets LOOM_COST_MODEL for the scope (unset: the shipped file).
class ModelPathScope {
 public:
  explicit ModelPathScope(const std::string& value) {
    if (const char* old = std::getenv("LOOM_COST_MODEL")) old_ = old;
    ::setenv("LOOM_COST_MODEL", value.c_str(), 1);
  }
  ~ModelPathScope() {
    if (old_.empty())
      ::unsetenv("LOOM_COST_MODEL");
    else
      ::setenv("LOOM_COST_MODEL", old_.c_str(), 1);
  }

 private:
  std::string old_;
};

/// What `f` writes to stderr.
template <class F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  char path[] = "/tmp/loom_test_stderr_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::string text = read_file(path);
  std::filesystem::remove(path);
  return text;
}

/// Runs `kernel` on the workload's reference inputs; empty when every output matches.
std::string difference_from_reference(const loom_test::workload& w, const Kernel& kernel) {
  const auto ref = loom_test::make_reference(w, 11);
  std::vector<loom_test::tensor_data> ins = ref.inputs, outs = ref.outputs;
  for (auto& o : outs) std::fill(o.bytes.begin(), o.bytes.end(), 0xff);
  std::vector<void*> ptrs;
  for (auto& i : ins) ptrs.push_back(i.data());
  for (auto& o : outs) ptrs.push_back(o.data());
  kernel.run_unchecked(ptrs.data());
  for (size_t o = 0; o < outs.size(); ++o) {
    std::string msg;
    if (!loom_test::compare_values<float>(outs[o], ref.outputs[o],
                                          static_cast<double>(w.reduction_length), msg))
      return w.dag->outputs()[o].name() + ": " + msg;
  }
  return {};
}

/// Programs of a GEMM sampled with a fixed seed for a fixed target (not the host's cores and
/// vector width), their features: what the golden predictions are made of.
std::vector<cost::ProgramFeatures> sampled_gemm_features(int count) {
  auto a = placeholder<float>("A", {64, 48});
  auto b = placeholder<float>("B", {48, 80});
  const Task task(ComputeDAG({a, b}, {ops::matmul(a, b)}), loom_test::test_target());
  search::ModelSearchOptions o;
  o.population = 64;
  o.generations = 0;
  o.top = count;
  o.seed = 3;
  cost::RandomCostModel random(5);
  return cost::extract_features(search::best_predicted(task, random, o), task.target);
}

const char* kGoldenPredictions = LOOM_TEST_DATA_DIR "/data/cost/pretrained_predictions.txt";

}  // namespace

TEST_CASE("the shipped cost model loads and predicts as when it was trained") {
  const std::string path = cost::pretrained_model_path();
  REQUIRE_MESSAGE(std::filesystem::exists(path), "no pretrained model at " << path);
  const auto model = cost::load_pretrained_model(path);
  CHECK(model->trained());
  // A version-1 model (Ansor's 164 features), which reads the prefix of this build's rows.
  CHECK(model->model().num_features() == cost::kNumAnsorFeatures);
  // Saving writes the file back byte for byte: nothing is lost or rounded on loading.
  std::ostringstream saved;
  model->save(saved);
  CHECK(saved.str() == read_file(path));
  CHECK(cost::pretrained_cost_model() != nullptr);

  const std::vector<cost::ProgramFeatures> programs = sampled_gemm_features(32);
  REQUIRE(programs.size() == 32);
  const std::vector<double> scores = model->predict(programs);
  std::ostringstream text;
  text.precision(17);
  for (double s : scores) text << s << '\n';
  if (const char* out = std::getenv("LOOM_WRITE_PRETRAINED_GOLDEN")) {
    std::ofstream(out) << text.str();
    MESSAGE("wrote " << out);
  } else {
    // Bit-exact: the text format stores every float exactly and prediction is deterministic, so
    // any difference is a change of the features, the predictor or the model file. Write the
    // golden file again (LOOM_WRITE_PRETRAINED_GOLDEN=<path>) only together with a new model.
    CHECK(text.str() == read_file(kGoldenPredictions));
  }
}

TEST_CASE("a missing, corrupt or stale model file is a named error, and a warning once") {
  CHECK_THROWS_WITH_AS(cost::load_pretrained_model("/nonexistent/cpu.model"),
                       doctest::Contains("loom.cost.E970"), user_error);
  TempLog corrupt("corrupt_model");
  std::ofstream(corrupt.path) << "loom-cost-model gbdt 1\nnot a gbdt\n";
  CHECK_THROWS_WITH_AS(cost::load_pretrained_model(corrupt.path),
                       doctest::Contains("loom.cost.E971"), user_error);
  // A model of three features per row: trained for another feature layout.
  TempLog stale("stale_model");
  {
    cost::GbdtCostModelOptions o;
    o.warmup_samples = 1;
    o.params.max_rounds = 2;
    cost::GbdtCostModel small(o);
    std::vector<cost::ProgramFeatures> programs;
    std::vector<double> labels;
    for (int i = 0; i < 16; ++i) {
      programs.push_back({{float(i), float(i % 3), 1.0f}, 1, 3});
      labels.push_back(i / 16.0);
    }
    small.update(programs, labels);
    std::ofstream out(stale.path);
    small.save(out);
  }
  CHECK_THROWS_WITH_AS(cost::load_pretrained_model(stale.path), doctest::Contains("loom.cost.E972"),
                       user_error);

  ModelPathScope scope(corrupt.path);
  std::string warned = stderr_of([] { CHECK(cost::pretrained_cost_model() == nullptr); });
  CHECK(warned.find("loom: warning: [loom.cost.E971]") != std::string::npos);
  CHECK(warned.find(corrupt.path) != std::string::npos);
  // Once per path: the second call is silent.
  CHECK(stderr_of([] { CHECK(cost::pretrained_cost_model() == nullptr); }).empty());
}

TEST_CASE("without a model, tuned_kernel falls back to the default schedule") {
  const auto w = loom_test::op_workloads::op_matmul_relu();
  const Task task(w.dag);
  TempLog log("no_model");
  {
    ModelPathScope scope("/nonexistent/cpu.model");
    std::pair<Kernel, ScheduleSource> built;
    const std::string warned = stderr_of([&] { built = kernel_from_records(task, log.path); });
    CHECK(built.second == ScheduleSource::Default);
    CHECK(built.first.source() == build(task).source());
    CHECK(warned.find("[loom.cost.E970]") != std::string::npos);
    CHECK_THROWS_WITH_AS(compile_from_model(task), doctest::Contains("loom.search.E862"),
                         user_error);
  }
  {
    ModelPathScope scope("none");  // turned off: no warning
    std::pair<Kernel, ScheduleSource> built;
    CHECK(stderr_of([&] { built = kernel_from_records(task, log.path); }).empty());
    CHECK(built.second == ScheduleSource::Default);
  }
}

TEST_CASE("compile_from_model: deterministic for a seed, correct against the interpreter") {
  namespace ow = loom_test::op_workloads;
  for (const auto& w : {ow::op_matmul(), ow::op_conv2d(), ow::op_softmax(), ow::op_layer_norm(),
                        ow::op_batch_matmul(), ow::op_depthwise()}) {
    CAPTURE(w.name);
    const Task task(w.dag);
    // The model alone: nothing timed, so the seed decides everything.
    ModelCompileOptions o;
    o.search.seed = 5;
    o.search.population = 512;
    o.time_top = 0;
    const ModelCompiled first = compile_from_model(task, o);
    const ModelCompiled again = compile_from_model(task, o);
    CHECK(sched::to_record(first.state.steps()) == sched::to_record(again.state.steps()));
    CHECK(first.kernel.source() == again.kernel.source());
    CHECK(first.rank == 0);
    CHECK(first.search_seconds > 0);
    CHECK(first.build_seconds > 0);
    std::string diff = difference_from_reference(w, first.kernel);
    CHECK_MESSAGE(diff.empty(), diff);
    // The default: the fastest of the model's first picks and the default schedule, timed.
    const ModelCompiled timed = compile_from_model(task);
    CHECK(timed.measure_seconds > 0);
    CHECK(timed.rank >= -1);
    CHECK(timed.rank < ModelCompileOptions{}.time_top);
    diff = difference_from_reference(w, timed.kernel);
    CHECK_MESSAGE(diff.empty(), diff);
  }
  // tuned_kernel's path for a computation the log has never seen.
  const auto w = ow::op_matmul_relu();
  TempLog log("model_compile");
  const auto built = kernel_from_records(Task(w.dag), log.path);
  CHECK(built.second == ScheduleSource::Predicted);
  const std::string diff = difference_from_reference(w, built.first);
  CHECK_MESSAGE(diff.empty(), diff);
  ModelCompileOptions bad;
  bad.time_top = -1;
  CHECK_THROWS_WITH_AS(compile_from_model(Task(w.dag), bad), doctest::Contains("loom.search.E864"),
                       user_error);
}

TEST_CASE("compile_from_model: measuring the model's top picks keeps the fastest correct one") {
  const auto w = loom_test::op_workloads::op_conv2d();
  ModelCompileOptions o;
  o.measure_top = 4;
  const ModelCompiled c = compile_from_model(Task(w.dag), o);
  CHECK(c.measure_seconds > 0);
  CHECK(c.rank >= 0);
  CHECK(c.rank < 4);
  const std::string diff = difference_from_reference(w, c.kernel);
  CHECK_MESSAGE(diff.empty(), diff);
}

TEST_CASE("the spot check catches a kernel that computes something else") {
  auto a = placeholder<float>("A", {33, 21});
  auto b = placeholder<float>("B", {21, 40});
  const Task plain(ComputeDAG({a, b}, {ops::matmul(a, b)}));
  // The same arguments (names, types, shapes), another computation.
  auto a2 = placeholder<float>("A", {33, 21});
  auto b2 = placeholder<float>("B", {21, 40});
  auto c2 = ops::matmul(a2, b2, false, false, "product");
  auto shifted = compute("matmul", {33, 40}, [&](Var i, Var j) { return c2(i, j) + 1.0f; });
  const Task other(ComputeDAG({a2, b2}, {shifted}));
  const Kernel right = build(plain);
  const Kernel wrong = build(other);
  CHECK(spot_check(plain, right, 64, 1e-3, 1e-4).empty());
  const std::string why = spot_check(plain, wrong, 64, 1e-3, 1e-4);
  CHECK(why.find("the interpreter says") != std::string::npos);
}

TEST_CASE("tuning can start from the pretrained model") {
  const auto w = loom_test::op_workloads::op_matmul_relu();
  TempLog log("pretrained_start");
  TuneOptions o;
  o.trials = 16;
  o.measures_per_round = 8;
  o.records = log.path;
  o.quiet = true;
  o.evolution.population = 128;
  o.evolution.generations = 1;
  o.measure.repeat = 1;
  o.rerank_top = 0;
  o.pretrained = cost::pretrained_cost_model();
  REQUIRE(o.pretrained != nullptr);
  const TuneResult r = tune(Task(w.dag), o);
  CHECK(r.report().trials == 16);
  REQUIRE(r.found());
  const std::string diff = difference_from_reference(w, r.kernel());
  CHECK_MESSAGE(diff.empty(), diff);
  o.pretrained_samples = -1;
  CHECK_THROWS_WITH_AS(tune(Task(w.dag), o), doctest::Contains("loom.search.E840"), user_error);
}

TEST_CASE("tune and tune_tasks start from the shipped model unless told not to") {
  const TuneOptions by_default;
  CHECK(by_default.warm_start);
  CHECK(by_default.pretrained == nullptr);
  CHECK(loom::detail::with_warm_start(by_default).pretrained == cost::pretrained_cost_model());
  TuneOptions cold;
  cold.warm_start = false;
  CHECK(loom::detail::with_warm_start(cold).pretrained == nullptr);
  // A random model has nothing to mix the shipped one with; a given model is kept.
  TuneOptions random;
  random.model = search::ModelKind::random;
  CHECK(loom::detail::with_warm_start(random).pretrained == nullptr);
  TuneOptions given;
  given.pretrained = std::make_shared<cost::RandomCostModel>(3);
  CHECK(loom::detail::with_warm_start(given).pretrained == given.pretrained);
}
