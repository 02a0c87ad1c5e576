// Why cuda::tune trains its model from the first round (cuda::tuning_options), replayed on the
// H200's shipped tuning logs (benchmarks/results/h200_tuning_logs.jsonl.gz): the first 64
// programs measured for the bf16 GEMM 4096³ train the model with the options cuda::tune uses,
// and the search's next round is then nearly all tensor-core programs. With Ansor's warm-up of
// 100 programs the model is still untrained there and the round is about half SIMT programs,
// 100 times slower. Before any program is measured, cuda::tune ranks by the pretrained GPU
// model (trained on those logs), which picks tensor-core programs for workloads it never saw.
// No GPU: replay, features and the search's lowering only.
#include <doctest/doctest.h>

#include <loom/cost/features.hpp>
#include <loom/cost/model.hpp>
#include <loom/cost/pretrained.hpp>
#include <loom/cuda.hpp>
#include <loom/sched/record.hpp>
#include <loom/search/evolution.hpp>
#include <loom/search/records.hpp>

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cost/gz_io.hpp"
#include "gpu/gpu_workloads.hpp"

using namespace loom;

namespace {

bool on_tensor_cores(const sched::State& s) {
  return sched::to_record(s.steps()).find("\"tensorize\"") != std::string::npos;
}

/// Tensor-core programs among the 64 the search picks after the first `first` programs of the
/// log, with a model trained on them under `gbdt`.
int tensor_core_picks(const Task& task, const std::string& log, size_t first,
                      const cost::GbdtCostModelOptions& gbdt) {
  std::vector<sched::State> measured;
  std::vector<double> costs;
  std::istringstream in(log);
  for (std::string line; measured.size() < first && std::getline(in, line);) {
    const search::TuningRecord r = search::record_from_json_line(line);
    if (r.workload_key != task.workload_key() || r.target != task.target.to_string()) continue;
    measured.push_back(sched::replay(task.dag, r.steps));
    costs.push_back(r.result.ok() ? r.result.mean_cost() : search::kFailedCost);
  }
  REQUIRE(measured.size() == first);
  const double best = *std::min_element(costs.begin(), costs.end());
  std::vector<double> labels, throughputs;
  for (double c : costs) {
    const bool failed = c >= search::kFailedCost;
    labels.push_back(failed ? 0.0 : best / c);
    throughputs.push_back(failed ? 0.0 : 1.0 / c);
  }
  cost::GbdtCostModel model(gbdt);
  model.update(cost::extract_features(measured, task.target), labels);
  search::EvolutionarySearch search(task, {}, {}, /*seed=*/7);
  search.add_measured(measured, throughputs);
  int tensor_core = 0;
  for (const sched::State& s : search.next_batch(64, model)) tensor_core += on_tensor_cores(s);
  return tensor_core;
}

std::optional<Task> bench_gpu_task(const std::string& name) {
  std::optional<Task> task;
  for (const loom_bench_gpu::Spec& s : loom_bench_gpu::workload_specs(
           [&](const std::string& spec_name) { return spec_name == name; }))
    task = loom_bench_gpu::loom_task(s, loom_bench_gpu::hopper_target());
  return task;
}

}  // namespace

TEST_SUITE("cuda.model_warmup") {
  TEST_CASE("a model trained on the first round steers the next to tensor cores") {
    const std::string log =
        loom_bench::read_gz(LOOM_TEST_DATA_DIR "/../benchmarks/results/h200_tuning_logs.jsonl.gz");
    REQUIRE(!log.empty());
    const std::optional<Task> task = bench_gpu_task("gemm4096_bf16");
    REQUIRE(task.has_value());

    const search::TuneOptions gpu = cuda::tuning_options({});
    CHECK(gpu.gbdt.warmup_samples <= gpu.measures_per_round);
    const int trained = tensor_core_picks(*task, log, 64, gpu.gbdt);
    const int untrained = tensor_core_picks(*task, log, 64, search::TuneOptions{}.gbdt);
    MESSAGE("tensor-core programs of 64 picked: " << trained << " with cuda::tune's model, "
                                                  << untrained << " with Ansor's warm-up");
    CHECK(trained >= 56);
    CHECK(untrained < trained);
  }

  TEST_CASE("the pretrained GPU model picks tensor-core programs for workloads it never saw") {
    const search::TuneOptions gpu = cuda::tuning_options({});
    REQUIRE(gpu.pretrained != nullptr);
    CHECK(gpu.pretrained == cost::pretrained_gpu_cost_model());
    // Neither workload is in the logs the model learned from (h200_tuning_logs.jsonl.gz).
    for (const char* name : {"gemm4096_fp16", "conv2d_nhwc_n32_512x7x7_k512_3x3_fp16"}) {
      CAPTURE(name);
      const std::optional<Task> task = bench_gpu_task(name);
      REQUIRE(task.has_value());
      search::EvolutionarySearch search(*task, {}, {}, /*seed=*/7);
      cost::RandomCostModel random(7);
      int pretrained = 0, at_random = 0;
      for (const sched::State& s : search.next_batch(64, *gpu.pretrained))
        pretrained += on_tensor_cores(s);
      search::EvolutionarySearch again(*task, {}, {}, /*seed=*/7);
      for (const sched::State& s : again.next_batch(64, random)) at_random += on_tensor_cores(s);
      MESSAGE(std::string(name) << ": tensor-core programs of 64 picked: " << pretrained
                                << " by the pretrained GPU model, " << at_random << " at random");
      CHECK(pretrained >= 56);
      CHECK(at_random < pretrained);
    }
  }
}
