// loomc: loom's command-line driver for ONNX models, as tvmc is TVM's.
//
//   loomc info model.onnx                                   groups, tasks, weights, FLOPs
//   loomc tune model.onnx --records r.jsonl --trials N      the task scheduler (resumable)
//   mpirun -np 9 --hostfile hosts loomc tune model.onnx ...   the same across machines: rank 0
//                                                            searches, the others measure
//   loomc run  model.onnx --records r.jsonl --input in.npy --output out.npy --repeat 50
//
// Errors are one line naming the problem, and the exit code is 1 (2 for a bad command line).
#include "loom/network.hpp"
#include "loom/onnx.hpp"
#include "loom/runtime/parallel.hpp"

#if LOOM_WITH_MPI
#include "loom/mpi.hpp"
#endif

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Common {
  std::string model;
  std::vector<std::string> dims;  // NAME=N
  int threads = 0;
};

loom::OnnxModel import_model(const Common& c) {
  loom::OnnxOptions options;
  for (const std::string& d : c.dims) {
    const auto eq = d.find('=');
    if (eq == std::string::npos || eq == 0)
      throw CLI::ValidationError("--dim", "'" + d + "' is not NAME=N");
    try {
      options.dimensions[d.substr(0, eq)] = std::stoll(d.substr(eq + 1));
    } catch (const std::exception&) {
      throw CLI::ValidationError("--dim", "'" + d + "' is not NAME=N");
    }
  }
  return loom::import_onnx(c.model, options);
}

// .npy or an ONNX TensorProto (.pb), by extension.
loom::HostTensor read_input(const std::string& path) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".pb") == 0)
    return loom::read_tensor_proto(path);
  return loom::read_npy(path);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double at = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

int info(const Common& c) {
  const loom::OnnxModel m = import_model(c);
  const auto& s = m.stats;
  std::cout << c.model << ": opset " << m.opset << ", " << s.nodes << " nodes; at import "
            << s.folded_constants << " folded to constants, " << s.folded_batch_norms
            << " batch norms folded into convolutions, " << s.fused_layer_norms
            << " layer norms fused, " << s.dropped << " Identity/Dropout dropped\n";
  int64_t weight_bytes = 0;
  for (const auto& k : m.network->constants())
    weight_bytes += static_cast<int64_t>(k.bytes->size());
  std::cout << "weights: " << m.network->constants().size() << " tensors, " << weight_bytes / 1e6
            << " MB\n";
  for (size_t i = 0; i < m.input_names.size(); ++i) {
    const auto& t = m.network->inputs()[i];
    std::cout << "input  '" << m.input_names[i] << "' " << loom::ir::to_string(t.dtype()) << " [";
    for (size_t d = 0; d < t.shape().size(); ++d) std::cout << (d ? ", " : "") << t.shape()[d];
    std::cout << "]\n";
  }
  for (size_t i = 0; i < m.output_names.size(); ++i) {
    const auto& t = m.network->outputs()[i];
    std::cout << "output '" << m.output_names[i] << "' " << loom::ir::to_string(t.dtype()) << " [";
    for (size_t d = 0; d < t.shape().size(); ++d) std::cout << (d ? ", " : "") << t.shape()[d];
    std::cout << "]\n";
  }
  std::cout << *m.network;
  return 0;
}

int tune(const Common& c, const std::string& records, int trials, double minutes, int per_round,
         double target_ms, bool separate_models, bool round_robin, bool warm_weights,
         const std::string& curve, const loom::search::MeasureOptions& limits) {
  if (records.empty())
    throw CLI::ValidationError("--records", "tune needs a records file to write (and resume from)");
  if (trials <= 0 && minutes <= 0)
    throw CLI::ValidationError("--trials", "give --trials N and/or --minutes M");
  const loom::OnnxModel m = import_model(c);
  if (c.threads > 0) loom::runtime::set_num_threads(c.threads);
  loom::TaskSchedulerOptions t;
  t.trials = trials > 0 ? trials : loom::search::kUnlimitedTrials;
  t.time_limit_s = minutes * 60;
  t.tune.records = records;
  t.tune.measures_per_round = per_round;
  t.latency_target_s = target_ms * 1e-3;
  t.share_cost_model = !separate_models;
  t.round_robin = round_robin;
  t.tune.measure.cold_constants = !warm_weights;
  t.tune.measure.build_timeout_s = limits.build_timeout_s;
  t.tune.measure.run_timeout_s = limits.run_timeout_s;
  t.tune.measure.memory_limit_mb = limits.memory_limit_mb;
  t.log = &std::cout;
  // Under mpirun or srun, rank 0 searches and writes the records, the other ranks measure and
  // print nothing.
#if LOOM_WITH_MPI
  const bool across_ranks = loom::mpi::launched_by_mpi() && loom::mpi::size() > 1;
  if (across_ranks && loom::mpi::rank() != 0) {
    loom::mpi::tune(*m.network, t);
    return 0;
  }
#endif
  std::cout << "tuning " << m.network->tasks().size() << " tasks of " << c.model << " on "
            << loom::runtime::num_threads() << " threads";
#if LOOM_WITH_MPI
  if (across_ranks) std::cout << " × " << loom::mpi::size() - 1 << " measuring ranks";
#endif
  std::cout << "; records: " << records << "\n";
#if LOOM_WITH_MPI
  const auto report = across_ranks ? loom::mpi::tune(*m.network, t) : loom::tune(*m.network, t);
#else
  const auto report = loom::tune(*m.network, t);
#endif
  std::cout << "done: " << report.trials << " programs measured\n";
  // Where the time went: the search rank's own work (search, model) against measuring, the
  // inputs of the scaling model in benchmarks/README.md ("Tuning across machines").
  double search = 0, model = 0, measuring = 0, builds = 0, runs = 0;
  for (const auto& task : report.tasks) {
    search += task.search_seconds;
    model += task.train_seconds;
    measuring += task.measure_seconds;
    builds += task.compile_seconds;
    runs += task.run_seconds;
  }
  std::printf(
      "time: %.1f s wall; search %.1f s, model training %.1f s, measuring %.1f s "
      "(builds %.1f s summed over parallel builds, runs %.1f s)\n",
      report.wall_seconds, search, model, measuring, builds, runs);
  if (!curve.empty()) {
    // The network's estimated latency after each round: the scheduler ablation's data.
    std::ofstream out(curve);
    out << "trials,seconds,latency_ms\n";
    for (const auto& p : report.curve)
      if (p.latency < loom::search::kFailedCost)
        out << p.trials << ',' << p.elapsed_seconds << ',' << p.latency * 1e3 << '\n';
    std::cout << "wrote " << curve << "\n";
  }
  return 0;
}

// Per group: its kernel's median time inside the network, share, throughput, and the task's.
void print_profile(const loom::CompiledNetwork& compiled,
                   const std::vector<loom::BufferView>& views, int repeat) {
  const auto& net = compiled.network();
  const std::vector<double> seconds = compiled.profile(views, std::max(repeat, 3));
  double total = 0;
  for (double s : seconds) total += s;
  std::vector<int> task_of(net.groups().size(), -1);
  for (size_t t = 0; t < net.tasks().size(); ++t)
    for (int g : net.tasks()[t].groups) task_of[static_cast<size_t>(g)] = static_cast<int>(t);
  std::printf("%-5s %-11s %-5s %9s %6s %9s  %s\n", "group", "pattern", "task", "ms", "share",
              "GFLOP/s", "output");
  for (size_t g = 0; g < seconds.size(); ++g) {
    const auto& group = net.groups()[g];
    const double flops = group.dag->flop_count();
    std::printf("%-5zu %-11s %-5d %9.4f %5.1f%% %9.1f  %s\n", g,
                loom::net::pattern_name(group.pattern), task_of[g], seconds[g] * 1e3,
                100 * seconds[g] / total, seconds[g] > 0 ? flops / seconds[g] * 1e-9 : 0.0,
                net.dag().ops()[static_cast<size_t>(group.output())].name().c_str());
  }
  std::printf("sum of the groups' medians: %.3f ms\n", total * 1e3);
}

int run(const Common& c, const std::string& records, const std::vector<std::string>& inputs,
        const std::string& output, int repeat, const std::string& check, double rtol, double atol,
        bool profile) {
  const loom::OnnxModel m = import_model(c);
  if (c.threads > 0) loom::runtime::set_num_threads(c.threads);
  const auto& net = *m.network;
  if (inputs.size() != net.inputs().size())
    throw CLI::ValidationError("--input", "the model has " + std::to_string(net.inputs().size()) +
                                              " inputs; " + std::to_string(inputs.size()) +
                                              " were given");
  std::vector<loom::HostTensor> in;
  for (const auto& p : inputs) in.push_back(read_input(p));
  std::vector<loom::HostTensor> out;
  for (const auto& o : net.outputs()) out.emplace_back(o.name(), o.dtype(), o.shape());
  std::vector<loom::BufferView> views;
  for (auto& t : in) views.push_back(t.view());
  for (auto& t : out) views.push_back(t.view());

  const auto t0 = std::chrono::steady_clock::now();
  loom::CompiledNetwork compiled = loom::compile(m.network, {.records = records});
  const double compile_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "compiled " << net.tasks().size() << " tasks in " << compile_s << " s ("
            << compiled.tuned_tasks().size() << " tuned, " << compiled.untuned_tasks().size()
            << " default schedules, " << compiled.packed_tasks().size()
            << " with packed weights) on " << loom::runtime::num_threads() << " threads\n";
  compiled.run(views);  // warm-up: first touch of the arena and the weights
  std::vector<double> ms;
  for (int r = 0; r < repeat; ++r) {
    const auto a = std::chrono::steady_clock::now();
    compiled.run(views);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  if (!ms.empty()) {
    const double median = percentile(ms, 0.5);
    std::printf("latency over %d runs: median %.3f ms, p10 %.3f ms, p90 %.3f ms (%.1f GFLOP/s)\n",
                repeat, median, percentile(ms, 0.1), percentile(ms, 0.9),
                net.flop_count() / (median * 1e6));
  }
  if (profile) print_profile(compiled, views, repeat);
  if (!output.empty()) {
    loom::write_npy(output, out[0]);
    std::cout << "wrote " << output << "\n";
  }
  if (!check.empty()) {
    const loom::HostTensor want = read_input(check);
    const loom::HostTensor& got = out[0];
    if (want.shape != got.shape || !(want.dtype == loom::ir::DType::f32()) ||
        !(got.dtype == loom::ir::DType::f32()))
      throw CLI::ValidationError("--check",
                                 "'" + check + "' is not a float32 tensor of the output's shape");
    double max_abs = 0, largest = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i)
      largest = std::max(largest, std::abs(double(want.data<float>()[i])));
    int64_t bad = 0;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      const double a = got.data<float>()[i], b = want.data<float>()[i];
      const double err = std::abs(a - b);
      max_abs = std::max(max_abs, err);
      bad += !(err <= atol + rtol * std::abs(b));
    }
    std::printf(
        "check against %s: max |diff| %.3g (largest |reference| %.3g), %lld of %lld elements "
        "outside rtol %.0e + atol %.0e\n",
        check.c_str(), max_abs, largest, static_cast<long long>(bad),
        static_cast<long long>(got.num_elements()), rtol, atol);
    return bad ? 3 : 0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#if LOOM_WITH_MPI
  // MPI_Init only under a launcher: a plain `loomc` never touches MPI.
  std::optional<loom::mpi::Environment> mpi;
  if (loom::mpi::launched_by_mpi()) mpi.emplace(argc, argv);
#endif
  CLI::App app{"loomc: import, tune and run ONNX models with loom"};
  app.require_subcommand(1);
  Common c;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("model", c.model, "the .onnx file")->required()->check(CLI::ExistingFile);
    sub->add_option("--dim", c.dims,
                    "NAME=N: the value of a symbolic dimension (e.g. batch_size=1)");
    sub->add_option("--threads", c.threads, "threads for the kernels (default: all cores)")
        ->check(CLI::NonNegativeNumber);
  };
  CLI::App* info_cmd = app.add_subcommand("info", "groups, tasks, weights and FLOPs of a model");
  add_common(info_cmd);

  std::string records;
  int trials = 0, per_round = 16;
  double minutes = 0;
  CLI::App* tune_cmd =
      app.add_subcommand("tune", "tune the model's tasks together (resumes from --records)");
  add_common(tune_cmd);
  tune_cmd->add_option("--records", records, "tuning records to write and resume from")->required();
  tune_cmd->add_option("--trials", trials, "programs to measure over all tasks")
      ->check(CLI::NonNegativeNumber);
  tune_cmd->add_option("--minutes", minutes, "wall-clock budget")->check(CLI::NonNegativeNumber);
  tune_cmd->add_option("--per-round", per_round, "programs measured per round")
      ->check(CLI::PositiveNumber);
  double target_ms = 0;
  bool separate_models = false;
  tune_cmd
      ->add_option("--latency-target-ms", target_ms, "stop once the estimated latency is this low")
      ->check(CLI::NonNegativeNumber);
  tune_cmd->add_flag("--separate-models", separate_models,
                     "one cost model per task instead of one for the network");
  bool round_robin = false;
  std::string curve;
  tune_cmd->add_flag("--round-robin", round_robin,
                     "rounds to the tasks in turn, not by gradient (ablation)");
  bool warm_weights = false;
  tune_cmd->add_flag(
      "--warm-weights", warm_weights,
      "time programs with their weights left in the caches by the previous run (default: "
      "evicted, as the network's other layers leave them)");
  tune_cmd->add_option("--curve", curve, "write the estimated latency after each round (CSV)");
  // What one measured program may take before it is stopped and recorded as failed.
  loom::search::MeasureOptions limits;
  tune_cmd->add_option("--build-timeout", limits.build_timeout_s, "seconds a program may build")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tune_cmd->add_option("--run-timeout", limits.run_timeout_s, "seconds a program may run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tune_cmd
      ->add_option("--memory-limit-mb", limits.memory_limit_mb,
                   "MiB a program's build or run may allocate (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  std::vector<std::string> inputs;
  std::string output, check;
  int repeat = 20;
  double rtol = 1e-3, atol = 1e-4;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "compile the model (best records, or default schedules) and run it");
  add_common(run_cmd);
  run_cmd->add_option("--records", records, "tuning records (none: default schedules)");
  run_cmd->add_option("--input", inputs, "one file per model input: .npy or ONNX TensorProto .pb")
      ->required()
      ->check(CLI::ExistingFile);
  run_cmd->add_option("--output", output, "write the first output here (.npy)");
  run_cmd->add_option("--repeat", repeat, "timed runs after one warm-up")
      ->check(CLI::NonNegativeNumber);
  run_cmd
      ->add_option("--check", check,
                   "compare the first output with this .npy / .pb (exit code 3 when it differs)")
      ->check(CLI::ExistingFile);
  run_cmd->add_option("--rtol", rtol, "relative tolerance of --check");
  run_cmd->add_option("--atol", atol, "absolute tolerance of --check");
  bool profile = false;
  run_cmd->add_flag("--profile", profile,
                    "time each fused group inside the network (median over --repeat runs)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*info_cmd) return info(c);
    if (*tune_cmd)
      return tune(c, records, trials, minutes, per_round, target_ms, separate_models, round_robin,
                  warm_weights, curve, limits);
    if (*run_cmd) return run(c, records, inputs, output, repeat, check, rtol, atol, profile);
  } catch (const CLI::Error& e) {
    std::cerr << "loomc: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "loomc: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
