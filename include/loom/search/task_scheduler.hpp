/// \file
/// Tuning several tasks at once (layer search/): Ansor's gradient-based task scheduler
/// (`../shared/reference/ansor.md` §6; TVM's `auto_scheduler.TaskScheduler`). A network is a set
/// of subgraphs (tasks), each appearing `weight` times; what matters is the network's latency,
/// Σ weight × best cost, not any one task's. The scheduler spends the budget a round (64
/// programs) at a time, on the task whose next round is expected to cut that latency most.
///
/// The allocation (`TaskAllocator`, plain arithmetic, testable without measuring):
/// - warm-up: every task gets one round, in order;
/// - then each round goes to the task with the most negative gradient
///     w_i × (α · backward_i + (1 − α) · forward_i), where
///   backward_i = (g_i(t_i) − g_i(t_i − Δt)) / Δt, how much its best cost g_i fell over its last
///   Δt = `backward_window` rounds (0 until it has had that many), and
///   forward_i = min(g_i − g_i / t_i, β · flops_i / V_i) − g_i, an optimistic guess: another
///   round cuts the cost as much as an average round so far did, or as far as the cost at 1/β of
///   V_i, the best throughput among the tasks of its group (tasks with the same tag, e.g. every
///   conv2d; no such bound for a task alone in its group), which catches a task that lags its
///   kind; a task with no correct program yet comes first;
/// - with probability ε (`eps_greedy`) the round goes to a random live task instead;
/// - a task is dead (gets no more rounds) once its search space is exhausted, or when its best
///   has not improved for `early_stopping_per_task` of its programs (0: never).
///
/// The driver (`tune_tasks_with`) gives a task a round by calling tune_with() for that many
/// trials, resuming from the records file (so its model is retrained on everything measured for
/// the task so far, and nothing measured is measured again): the same state Ansor carries from
/// round to round. At the end each task's fastest programs are measured again, as tune_with()
/// does (TuneOptions::rerank_top), and each task's best is the lowest median.
///
/// One cost model for the network, as in Ansor (`share_cost_model`, on by default): every
/// round's model learns from the task's own measurements and from every other task's, each
/// labelled against its own task's best (TuneOptions::shared_samples), so a task's first rounds
/// are guided by what the network's other tasks taught, not by random scores until its own
/// warm-up is over.
///
/// Objectives: the weighted sum (the network's latency), and the paper's latency requirement
/// (`latency_target_s`): max(Σ weight × best, L) has no gradient once the network runs in L,
/// so tuning stops there ("latency target met").
#ifndef LOOM_SEARCH_TASK_SCHEDULER_HPP
#define LOOM_SEARCH_TASK_SCHEDULER_HPP

#include "loom/search/tuner.hpp"

#include <cstdint>
#include <iosfwd>
#include <random>
#include <string>
#include <vector>

LOOM_BEGIN_NAMESPACE
namespace search {

/// A task of a network: how often it runs in one inference, and its group.
struct WeightedTask {
  Task task;
  /// How many times the subgraph runs per inference (ResNet-50 has several identical convs); > 0.
  double weight = 1;
  /// Tasks with the same non-empty tag are "similar" (the forward gradient's β term); by
  /// default the DAG's first output name.
  std::string tag;
};

/// A trial budget that never ends a run: with `time_limit_s`, the clock alone stops it.
inline constexpr int kUnlimitedTrials = 1 << 30;

/// Settings of the task scheduler. Plain data.
struct TaskSchedulerOptions {
  /// Programs to measure in all, over all tasks (≥ one round per task; kUnlimitedTrials: no
  /// budget in trials).
  int trials = 1000;
  /// The gradient's weight of history against optimism (Ansor's α), the history's length in
  /// rounds (Δt), and how much faster than its group's fastest a task may hope to become (β).
  double alpha = 0.2;
  int backward_window = 3;
  double beta = 2;
  /// Chance that a round goes to a random live task.
  double eps_greedy = 0.05;
  /// A task whose best has not improved for this many of its own programs gets no more rounds
  /// (0: never).
  int early_stopping_per_task = 0;
  /// Each task's tuning: `tune.measures_per_round` is the round size, `tune.records` the log
  /// (required: it is what carries a task's measurements from one of its rounds to the next),
  /// `tune.seed` the base of every round's seed. `tune.trials`, `tune.early_stopping`,
  /// `tune.time_limit_s` and `tune.quiet` are the scheduler's to set.
  TuneOptions tune;
  /// Stop after this many seconds of wall time, checked between rounds (0: no limit).
  double time_limit_s = 0;
  /// Stop once Σ weight × best cost is at most this many seconds (0: no target).
  double latency_target_s = 0;
  /// Train each round's cost model on every task's measurements (see the file comment).
  bool share_cost_model = true;
  /// Give the rounds to the live tasks in turn instead of by gradient (the paper's ablation
  /// baseline; TVM's `strategy="round-robin"`).
  bool round_robin = false;
  /// A line per round (which task, why, the network's estimated latency) and a summary.
  bool quiet = false;
  std::ostream* log = nullptr;
};

/// The allocation policy alone: which task gets the next round, given the best costs so far.
class TaskAllocator {
 public:
  /// `flops` per task (for the group term), `tags` as WeightedTask::tag.
  TaskAllocator(std::vector<double> weights, std::vector<double> flops,
                std::vector<std::string> tags, const TaskSchedulerOptions& options);

  /// The task for the next round, or -1 when every task is dead.
  int next();
  /// Records the end of a round of `task`: its best cost now (kFailedCost: none correct yet),
  /// how many programs it measured, and whether its space is exhausted.
  void finish_round(int task, double best_cost, int programs, bool exhausted);
  /// Why the last pick was made: "warm-up", "gradient", "random" (ε) or "tie".
  const std::string& last_reason() const { return reason_; }

  /// Σ weight × best cost over the tasks (kFailedCost when some task has no correct program).
  double objective() const;
  double gradient(int task) const;
  bool dead(int task) const { return dead_[static_cast<size_t>(task)]; }
  int rounds(int task) const { return rounds_[static_cast<size_t>(task)]; }
  size_t size() const { return weights_.size(); }

 private:
  std::vector<double> weights_, flops_;
  std::vector<std::string> tags_;
  TaskSchedulerOptions options_;
  std::vector<int> rounds_;                   // t_i
  std::vector<int> programs_;                 // programs measured per task
  std::vector<int> last_improved_;            // programs_ when its best last improved
  std::vector<std::vector<double>> history_;  // best cost after each of its rounds
  std::vector<char> dead_;
  std::mt19937_64 rng_;
  std::string reason_;
  double best_cost(size_t i) const {
    return history_[i].empty() ? kFailedCost : history_[i].back();
  }
};

/// What tune_tasks_with() did.
struct TaskSchedulerReport {
  /// Per task (in the order given): its last round's report, with `best`/`best_cost` the
  /// final best by median, `trials` the programs measured for it in all, `rounds` its rounds.
  std::vector<TuneReport> tasks;
  /// After each round: programs measured in all, and Σ weight × best cost then (seconds;
  /// kFailedCost while some task has no correct program).
  struct Point {
    int trials = 0;
    double elapsed_seconds = 0;
    double latency = kFailedCost;
  };
  std::vector<Point> curve;
  /// Which task each round went to, in order.
  std::vector<int> allocation;
  int trials = 0;
  double latency = kFailedCost;  ///< Σ weight × best cost at the end
  double wall_seconds = 0;
  std::string stop_reason;  ///< "trials", "time limit", "latency target met" or "all tasks done"
};

/// Tunes `tasks` together (see the file comment). Throws loom::user_error `[loom.search.E841]`
/// for bad options or an empty task list; failed measurements never throw.
TaskSchedulerReport tune_tasks_with(const std::vector<WeightedTask>& tasks,
                                    const TaskSchedulerOptions& options, Measurer& measurer);

}  // namespace search
LOOM_END_NAMESPACE

#ifndef LOOM_SEPARATE_COMPILATION
#include "loom/search/impl/task_scheduler.ipp"
#endif

#endif  // LOOM_SEARCH_TASK_SCHEDULER_HPP
