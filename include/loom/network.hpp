/// \file
/// Networks on the CPU (link `loom::llvm`): compile a `net::Network` (loom/net/network.hpp)
/// into one JIT-compiled kernel per task, run it, and tune its tasks together.
///
/// ```cpp
/// net::Network n({x}, {net::constant(w, weights)}, {y});
/// TaskSchedulerOptions t; t.trials = 2000; t.tune.records = "net.jsonl";
/// tune(n, t);                                    // optional: the task scheduler over its tasks
/// CompiledNetwork c = compile(n, {.records = "net.jsonl"});
/// c.run({BufferView(x_data, {1, 3, 32, 32}), BufferView(y_data, {1, 16, 32, 32})});
/// ```
///
/// Compiling builds, per task, the best record of `records` (the rule of `build_best`) or the
/// default schedule, with one warning on stderr naming the tasks that had no record. A tuned
/// program that was measured with a weight in the layout its loop nest walks (`tune` names the
/// network's constants to the measurer) gets that weight packed once here, per group, and reads
/// the packed copy at every run (cpu.hpp, build_with_packed_input). Running
/// checks every buffer's type and shape against the network's inputs and outputs, then runs the
/// groups in order: constants from their bound data, intermediates in one arena laid out by the
/// network's memory plan, each kernel parallel inside. `run` may be called from several threads;
/// the calls share the arena and run one at a time.
#ifndef LOOM_NETWORK_HPP
#define LOOM_NETWORK_HPP

#include "loom/cpu.hpp"

#if !LOOM_WITH_LLVM
// clang-format off: the header test finds the target this #error names on its line
#error "loom/network.hpp needs the LLVM backend: link the CMake target loom::llvm (apt install llvm-19-dev)"
// clang-format on
#endif

#include "loom/net/network.hpp"
#include "loom/runtime/buffer.hpp"
#include "loom/tune.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

LOOM_BEGIN_NAMESPACE

struct NetworkOptions {
  /// Tuning records to build each task's best program from; empty: default schedules.
  std::string records;
};

/// A network compiled for this CPU. Copies share the kernels and the arena.
class CompiledNetwork {
 public:
  /// Runs the network: views of its inputs (in the network's order), then of its outputs.
  /// Throws loom::user_error `[loom.net.E1005]` for a wrong number of buffers, `[loom.net.E1006]`
  /// for a buffer of another type or shape, before running anything.
  void run(const std::vector<BufferView>& inputs_then_outputs) const;

  /// Where the time goes: per group (partition order), the median seconds of its kernel over
  /// `repeat` runs of the whole network, each group timed in place between its neighbours (so
  /// the caches hold what they hold in a real run). Checks and throws as run().
  std::vector<double> profile(const std::vector<BufferView>& inputs_then_outputs,
                              int repeat = 10) const;
  const net::Network& network() const { return *state_->network; }
  /// The tasks built from a record of `NetworkOptions::records`, and those that took the
  /// default schedule, by the task's output name.
  const std::vector<std::string>& tuned_tasks() const { return state_->tuned; }
  const std::vector<std::string>& untuned_tasks() const { return state_->untuned; }
  /// The tuned tasks whose program reads a weight packed at compile time.
  const std::vector<std::string>& packed_tasks() const { return state_->packed; }

 private:
  friend CompiledNetwork compile(std::shared_ptr<const net::Network>, const NetworkOptions&);
  void run_groups(const std::vector<BufferView>& inputs_then_outputs,
                  std::vector<double>* seconds) const;
  struct packed_weight {
    int argument = -1;  // which argument of the task's kernel reads it
    std::vector<int64_t> shape;
    std::vector<aligned_vector<unsigned char>> per_group;  // indexed like the task's groups
  };
  struct state {
    std::shared_ptr<const net::Network> network;
    std::vector<Kernel> kernels;                // per task
    std::vector<packed_weight> packed_weights;  // per task; argument -1: none
    std::vector<int> task_of_group;             // per group
    std::vector<int> place_in_task;             // per group: its index among its task's groups
    // Per group, its kernel's arguments (inputs, then output), and which of them are the
    // caller's buffers: (argument, index into run()'s buffers). run() fills those in.
    std::vector<std::vector<BufferView>> views;
    std::vector<std::vector<std::pair<size_t, size_t>>> caller_slots;
    std::vector<std::string> tuned, untuned, packed;
    aligned_vector<unsigned char> arena;
    std::mutex running;
  };
  std::shared_ptr<state> state_;
};

/// Compiles `network` for this CPU (see the top of this file).
CompiledNetwork compile(std::shared_ptr<const net::Network> network,
                        const NetworkOptions& options = {});

/// Tunes the network's tasks together with the task scheduler (tune_tasks; each task weighted
/// by how often it runs per inference), with the network's constants named as constant inputs
/// (TuneOptions::constant_inputs) so that programs are measured reading packed weights, and,
/// unless `options.tune.measure.cold_constants` says otherwise, with those weights evicted from
/// the caches before each timed run, as the network's other layers leave them.
/// `options.tune.records` is where the records go, and what `compile` then reads.
search::TaskSchedulerReport tune(const net::Network& network, const TaskSchedulerOptions& options);

namespace detail {
/// What tune(network) tunes, shared with loom::mpi::tune: the network's tasks, each weighted by
/// how often it runs, and `options` with the network's constants named as constant inputs and
/// cold unless asked otherwise.
struct NetworkTuning {
  std::vector<WeightedTask> tasks;
  TaskSchedulerOptions options;
};
NetworkTuning network_tuning(const net::Network& network, const TaskSchedulerOptions& options);
}  // namespace detail

LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/impl/network.ipp"
#endif

#endif  // LOOM_NETWORK_HPP
